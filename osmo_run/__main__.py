"""``python -m osmo_run`` runs the command line."""

from osmo_run.cli import main

main()
