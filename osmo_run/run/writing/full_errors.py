"""Where a failed row's full error text goes when its message was cut to one line.

A row keeps the first meaningful line of its error (``error_message``, see
:mod:`osmo_run.sdk.messages`); the whole text (an HTML page, a compose command with its
output) goes to a file and the row's ``backend.error_log`` names it: in the trial directory
when the backend kept one for the row (Harbor), else in the run's ``errors/`` directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from osmo_run.sdk.types import ExecutionResult

TRIAL_ERROR_FILE = "osmo-run-error.txt"
"""The file in a kept trial directory that holds the row's full error text."""


def keep_full_error(
    result: ExecutionResult, errors_dir: Path, name: str, mask: Callable[[str], str]
) -> None:
    """Write ``result.error_detail`` (masked with ``mask``: secrets never reach the file)
    and point ``result.backend.error_log`` at it; nothing when the message was not cut.

    The file goes into ``result.backend.trial_dir`` when there is one, else to
    ``errors_dir/<name>.txt``, ``name`` being the rollout's safe name
    (:mod:`osmo_run.sdk.names`: a row id is never a path). A file that cannot be written
    leaves the row without the pointer and says so in its ``warnings``: the row itself is
    never lost for it.
    """
    detail = result.error_detail
    if not detail:
        return
    trial_dir = result.backend.trial_dir
    if trial_dir is not None and Path(trial_dir).is_dir():
        path = Path(trial_dir) / TRIAL_ERROR_FILE
    else:
        path = errors_dir / f"{name}.txt"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        # a lone surrogate (a \ud83d escape in the data) is kept as that escape
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(mask(detail) + "\n")
    except OSError as exc:
        result.warnings.append(
            f"the full error text could not be written to {path}: {exc.strerror or exc}"
        )
        return
    with contextlib.suppress(OSError):
        path.chmod(0o600)  # an existing file keeps its mode through O_TRUNC
    result.backend = dataclasses.replace(result.backend, error_log=str(path))
