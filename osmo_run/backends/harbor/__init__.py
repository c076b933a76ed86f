"""HarborBackend: each row in its own Harbor trial environment.

The only package that imports ``harbor``. It needs the ``harbor`` extra and Python >= 3.12;
without them, importing it raises :class:`~osmo_run.errors.BackendUnavailable` naming the
install command.
"""

from __future__ import annotations

import sys

from osmo_run.errors import BackendUnavailable

if sys.version_info < (3, 12):
    raise BackendUnavailable(
        "the harbor backend needs Python >= 3.12 (Harbor's requirement); this is "
        f"{sys.version.split()[0]}. Create the environment with a newer Python "
        "(scripts/find-python finds one)"
    )
try:
    import harbor  # noqa: F401 -- fail here, with the install command, not deep inside a run
except ImportError:
    raise BackendUnavailable(
        "the harbor backend needs the 'harbor' extra: pip install 'osmo-run[harbor]'"
    ) from None

from osmo_run.backends.harbor.backend import HarborBackend
from osmo_run.backends.harbor.preflight import environment_config

__all__ = ["HarborBackend", "environment_config"]
