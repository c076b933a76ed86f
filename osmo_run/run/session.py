"""One run from the command line's point of view: settings in, exit code out.

Shared by ``osmo-run local`` and ``osmo-run harbor``: the backend factory is the only
difference between them.
"""

from __future__ import annotations

import asyncio
import enum
import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from rich.console import Console

from osmo_run.backends.base import ExecutionBackend
from osmo_run.errors import OutputError
from osmo_run.run.dataset import Dataset
from osmo_run.run.display import make_display, render_summary
from osmo_run.run.output import OutputWriter
from osmo_run.run.runner import Runner
from osmo_run.run.spec import RunSpec
from osmo_run.run.summary import RunSummary
from osmo_run.sdk._rollout import run_to_completion


class ExitCode(enum.IntEnum):
    """The process exit codes, identical for every backend (documented in the README)."""

    OK = 0
    """Every row succeeded."""
    ROLLOUTS_FAILED = 1
    """The run finished, and at least one row failed or was not graded as it should."""
    INVALID_INPUT = 2
    """Bad invocation, spec, dataset or environment; nothing was run."""
    INTERNAL_ERROR = 3
    """A bug in osmo-run."""
    INTERRUPTED = 130
    """Ctrl-C or SIGTERM: in-flight rows were recorded as cancelled."""


@dataclass
class RunSettings:
    """Everything a run needs once the spec and the flags are merged."""

    dataset: Path
    spec: RunSpec
    output: Path
    display: str = "auto"
    overwrite: bool = False
    description: str = ""


def default_output(dataset: Path) -> Path:
    """``runs/<dataset stem>-<UTC time>/results.jsonl`` under the working directory."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{dataset.stem}-{stamp}" / "results.jsonl"


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def summary_path(output: Path) -> Path:
    """Where the summary JSON of ``output`` goes: beside it, ``<stem>.summary.json``."""
    return output.with_name(output.stem + ".summary.json")


def exit_code_for(summary: RunSummary) -> ExitCode:
    """0 when every row succeeded, 130 when interrupted, otherwise 1."""
    if summary.interrupted:
        return ExitCode.INTERRUPTED
    if summary.failed:
        return ExitCode.ROLLOUTS_FAILED
    return ExitCode.OK


def _check_output(output: Path, overwrite: bool) -> None:
    if output.is_dir():
        raise OutputError(f"{output}: --output names a directory; give a file path like x.jsonl")
    if output.exists() and output.stat().st_size > 0:
        if not overwrite:
            raise OutputError(
                f"{output}: already holds results; pass --overwrite to replace them "
                "or choose another --output"
            )
        output.unlink()


def execute_run(
    settings: RunSettings,
    make_backend: Callable[[], ExecutionBackend],
    console: Console,
    secrets: tuple[str, ...] = (),
) -> ExitCode:
    """Validate the dataset, run every row, write output and summary, print the summary.

    Raises :class:`~osmo_run.errors.OsmoRunError` for bad input before anything runs.
    """
    spec = settings.spec
    dataset = Dataset(
        settings.dataset,
        agent_timeout_sec=spec.timeouts.agent_sec,
        grader_timeout_sec=spec.timeouts.grader_sec,
        limit=spec.limit,
    )
    total, problems = dataset.validate(stop_on_error=spec.bad_rows == "stop")
    _check_output(settings.output, settings.overwrite)
    backend = make_backend()
    if settings.display == "plain":  # no control codes, even on a terminal (or a CI pty)
        console = Console(file=console.file, highlight=False, color_system=None)
    display = make_display(settings.display, console)
    description = (
        f"{settings.description} · {total} rows · concurrency {backend.max_concurrency} · "
        f"output {settings.output}"
    )
    if problems:
        description += f" · {len(problems)} bad rows recorded as validation errors"

    async def main() -> RunSummary:
        loop = asyncio.get_running_loop()
        with OutputWriter(settings.output, secrets) as writer:
            runner = Runner(backend, writer, display)

            def interrupt() -> None:
                display.message(
                    "Interrupted: cancelling rows in flight (press Ctrl-C again to quit at once)"
                )
                runner.interrupt()

            interrupted = False

            def on_signal(signum: int, frame: FrameType | None) -> None:
                # A Python-level handler, not loop.add_signal_handler: it runs even while a
                # workflow blocks the event loop, so a second Ctrl-C always quits at once.
                nonlocal interrupted
                if interrupted:
                    display.stop()
                    os._exit(ExitCode.INTERRUPTED)  # second Ctrl-C: leave now; rows are on disk
                interrupted = True
                try:
                    loop.call_soon_threadsafe(interrupt)
                except RuntimeError:
                    pass  # the loop has closed: the run is over

            for sig in _SIGNALS:
                signal.signal(sig, on_signal)
            await backend.prepare()
            display.start(total, description)
            try:
                return await runner.run(dataset.rows())
            finally:
                display.stop()
                await backend.aclose()

    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    try:
        summary = run_to_completion(main())
    finally:  # after leftover tasks had their grace, which a second Ctrl-C may cut short
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    summary_file = summary_path(settings.output)
    summary.output = str(settings.output)
    summary_file.write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    console.print(render_summary(summary))
    return exit_code_for(summary)
