"""Drive a dataset through a backend: dispatch, record, display, summarize.

The runner is the same for every backend. It keeps at most ``window`` rows in flight
(so memory does not grow with the dataset), writes each finished row to the output at
once, and on :meth:`Runner.interrupt` stops dispatching and records in-flight rows as
cancelled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

from osmo_run.backends.base import ExecutionBackend
from osmo_run.run.dataset import DatasetRow
from osmo_run.run.display import Display
from osmo_run.run.output import OutputWriter
from osmo_run.run.records import record_dict, record_line
from osmo_run.run.summary import RunSummary, SummaryBuilder
from osmo_run.sdk.types import ErrorCategory, ExecutionResult, Phase, RolloutStatus

CANCEL_WAIT_SEC = 5.0
"""How long in-flight rows may take to stop after an interrupt before they are abandoned."""

DEFAULT_WINDOW = 256
"""Rows in flight when the backend sets no limit (``max_concurrency == 0``)."""


@dataclass
class _Flight:
    row: DatasetRow
    started: float
    recorded: bool = False


class Runner:
    """Runs rows through ``backend`` and records each exactly once.

    ``writer`` errors (:class:`~osmo_run.errors.OutputError`) stop the run: nothing is
    dispatched after the first failed write, and the error propagates from :meth:`run`.
    """

    def __init__(
        self,
        backend: ExecutionBackend,
        writer: OutputWriter,
        display: Display,
        window: int | None = None,
    ) -> None:
        self._backend = backend
        self._writer = writer
        self._display = display
        self._window = window or backend.max_concurrency or DEFAULT_WINDOW
        self._stats = SummaryBuilder()
        self._flights: dict[str, _Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._interrupted = False
        self._fatal: BaseException | None = None
        self._wake: asyncio.Event | None = None
        backend.set_progress_listener(display.row_phase)

    @property
    def interrupted(self) -> bool:
        return self._interrupted

    def interrupt(self) -> None:
        """Stop dispatching and cancel in-flight rows (they are recorded as cancelled)."""
        if self._interrupted:
            return
        self._interrupted = True
        for task in list(self._tasks):
            task.cancel()
        if self._wake is not None:
            self._wake.set()

    def _record(self, flight: _Flight, result: ExecutionResult) -> None:
        if flight.recorded:
            return
        flight.recorded = True
        row = flight.row
        if not result.timings.total_sec:
            result.timings.total_sec = time.monotonic() - flight.started
        if result.error_message:  # the display prints it too: mask secrets there as well
            result.error_message = self._writer.mask(result.error_message)
        try:
            line = record_line(record_dict(row.index, row.line, result))
        except (ValueError, TypeError, RecursionError) as exc:  # NaN, a cycle, a non-str key
            result = _unwritable(result, exc)
            line = record_line(record_dict(row.index, row.line, result))
        try:
            self._writer.write(line)
        except BaseException as exc:
            self._fatal = exc
            self.interrupt()
            return
        self._stats.add(result)
        self._display.row_finished(result)

    def _on_workflow_complete(self, flight: _Flight, result: ExecutionResult) -> None:
        if result.status is RolloutStatus.GRADING:
            self._display.row_phase(flight.row.row_id, "grading")
        else:
            self._record(flight, result)

    async def _run_one(self, flight: _Flight) -> None:
        row = flight.row
        request = row.request
        try:
            if request is None:
                self._record(flight, _failure(row, ErrorCategory.VALIDATION_ERROR, row.error))
                return
            await self._backend.execute(
                request,
                lambda result: self._on_workflow_complete(flight, result),
                lambda result: self._record(flight, result),
            )
            if not flight.recorded:
                message = "the backend returned without a result (a backend bug)"
                self._record(flight, _failure(row, ErrorCategory.INTERNAL_ERROR, message))
        except asyncio.CancelledError:
            self._record(flight, _cancelled(row))
        except Exception as exc:
            message = f"the backend failed: {type(exc).__name__}: {exc}"
            self._record(flight, _failure(row, ErrorCategory.INTERNAL_ERROR, message))
        finally:
            self._flights.pop(row.row_id, None)
            # Discard here, not only in the done callback: the dispatcher may wake first.
            task = asyncio.current_task()
            if task is not None:
                self._tasks.discard(task)
            if self._wake is not None:
                self._wake.set()

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self._display.tick()

    async def run(self, rows: Iterable[DatasetRow]) -> RunSummary:
        """Run every row (until interrupted) and return the summary of what finished."""
        self._wake = asyncio.Event()
        ticker = asyncio.create_task(self._ticker())
        try:
            for row in rows:
                while len(self._tasks) >= self._window and not self._interrupted:
                    self._wake.clear()
                    await self._wake.wait()
                if self._interrupted:
                    break
                flight = _Flight(row, time.monotonic())
                self._flights[row.row_id] = flight
                self._display.row_started(row.row_id)
                task = asyncio.create_task(self._run_one(flight))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            await self._drain()
        finally:
            ticker.cancel()
        if self._fatal is not None:
            raise self._fatal
        return self._stats.build(output=str(self._writer.path), interrupted=self._interrupted)

    async def _drain(self) -> None:
        """Wait for in-flight rows; after an interrupt, give them ``CANCEL_WAIT_SEC``."""
        assert self._wake is not None
        while self._tasks and not self._interrupted:
            self._wake.clear()
            await self._wake.wait()
        if not self._tasks:
            return
        grace = max(CANCEL_WAIT_SEC, self._backend.cancel_grace_sec)
        _, still_running = await asyncio.wait(set(self._tasks), timeout=grace)
        for flight in list(self._flights.values()):
            self._record(flight, _cancelled(flight.row, abandoned=bool(still_running)))


def _failure(row: DatasetRow, category: ErrorCategory, message: str | None) -> ExecutionResult:
    return ExecutionResult(
        rollout_id=row.row_id,
        status=RolloutStatus.FAILURE,
        error_category=category,
        error_message=message,
        error_phase=Phase.SETUP,
    )


def _unwritable(result: ExecutionResult, exc: BaseException) -> ExecutionResult:
    """The failure recorded instead of a result that JSON cannot hold; the run goes on."""
    return ExecutionResult(
        rollout_id=result.rollout_id,
        status=RolloutStatus.FAILURE,
        error_category=ErrorCategory.VALIDATION_ERROR,
        error_message=f"the result cannot be written as JSON ({type(exc).__name__}: {exc}); "
        "messages, metrics and info must hold JSON values (no NaN, no cycles)",
        error_phase=result.error_phase or Phase.WORKFLOW,
        timings=result.timings,
    )


def _cancelled(row: DatasetRow, abandoned: bool = False) -> ExecutionResult:
    message = "the run was interrupted before this row finished"
    if abandoned:
        message += f"; it did not stop within {CANCEL_WAIT_SEC:g}s and was abandoned"
    return ExecutionResult(
        rollout_id=row.row_id,
        status=RolloutStatus.CANCELLED,
        error_category=ErrorCategory.CANCELLED,
        error_message=message,
    )
