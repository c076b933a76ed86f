"""Execution backends: where a rollout's workflow and grader run.

``LocalBackend`` imports nothing optional. ``HarborBackend`` is imported lazily (it needs
the ``harbor`` extra and Python >= 3.12); a missing extra raises
:class:`~osmo_run.errors.BackendUnavailable` with the install command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from osmo_run.backends.base import ExecutionBackend, ProgressListener, ResultCallback
from osmo_run.backends.local import LocalBackend

if TYPE_CHECKING:
    from osmo_run.backends.harbor import HarborBackend

__all__ = [
    "ExecutionBackend",
    "HarborBackend",
    "LocalBackend",
    "ProgressListener",
    "ResultCallback",
]


def __getattr__(name: str) -> Any:
    if name == "HarborBackend":
        from osmo_run.backends.harbor import HarborBackend

        return HarborBackend
    raise AttributeError(name)
