"""``osmo-run cleanup``: remove what killed harbor runs left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def cleanup(
    runs: Annotated[
        list[Path] | None,
        typer.Argument(help="Run directories (or results files) whose leftovers to remove."),
    ] = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Remove every osmo-run container and network.")
    ] = False,
) -> None:
    """Remove the containers, networks and unreferenced trial directories that a run
    killed with SIGKILL (or a lost machine) left behind. Trial directories that a result
    row points at (kept for debugging) stay."""
    from osmo_run.backends.harbor.cleanup import clean_all, clean_run
    from osmo_run.errors import InputError
    from osmo_run.run.report import LoadedRun
    from osmo_run.sdk.rollout import run_to_completion

    if not runs and not all_runs:
        raise InputError("name the run directories to clean up, or pass --all")
    for target in runs or []:
        run = LoadedRun.load(target)
        done = run_to_completion(clean_run(run))
        typer.echo(
            f"{run.paths.directory}: removed {done.containers} containers, {done.networks} "
            f"networks, {done.trial_dirs} trial directories ({done.kept_trial_dirs} kept: "
            "result rows point at them)"
        )
    if all_runs:
        done = run_to_completion(clean_all())
        typer.echo(f"removed {done.containers} osmo-run containers and {done.networks} networks")
