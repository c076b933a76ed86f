"""Drive a dataset through a backend: dispatch, record, display, summarize.

The runner is the same for every backend. It keeps at most ``window`` rows in flight
(so memory does not grow with the dataset), writes each finished row to the output at
once, and on :meth:`Runner.interrupt` stops dispatching and records in-flight rows as
cancelled. When its :class:`~osmo_run.run.breaker.Breaker` trips (rollouts in a row failing
with one systemic cause) it stops dispatching too, but lets the rows in flight finish and
records them as they end; only their retries of that same failure are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmo_run.backends.base import ExecutionBackend, ProgressPhase
from osmo_run.run.breaker import Breaker
from osmo_run.run.dataset import DatasetRow
from osmo_run.run.display import Display
from osmo_run.run.full_errors import keep_full_error
from osmo_run.run.output import OutputWriter
from osmo_run.run.records import attempt_dict, record_dict, record_line
from osmo_run.run.retry import NO_RETRIES, RetryPolicy
from osmo_run.run.runfiles import RunPaths
from osmo_run.run.scrub import scrub_directory
from osmo_run.run.summary import RunSummary, SummaryBuilder
from osmo_run.sdk.deadlines import INTERRUPT_GRACE_SEC
from osmo_run.sdk.messages import short_message
from osmo_run.sdk.model_layer import current_model_layer
from osmo_run.sdk.model_retry import asked_wait_sec
from osmo_run.sdk.names import rollout_name, safe_name
from osmo_run.sdk.rollout import start_task
from osmo_run.sdk.types import (
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    Phase,
    RolloutStatus,
)


def _as_it_is(text: str) -> str:
    return text


DEFAULT_WINDOW = 256
"""Rows in flight when the backend sets no limit (``max_concurrency == 0``)."""


@dataclass
class WorkItem:
    """One rollout to run: a dataset row, or one sample of it.

    ``request`` is ``None`` for a bad row recorded as a validation error; its id is the
    row id, suffixed ``~k`` per sample when a row runs more than once. ``earlier`` lists
    the attempts an earlier invocation recorded for it (a rerun continues their count).
    """

    row: DatasetRow
    sample_index: int
    request: ExecutionRequest | None
    earlier: list[dict[str, Any]] | None = None

    @property
    def rollout_id(self) -> str:
        return self.request.id if self.request is not None else self.row.row_id

    @property
    def safe_name(self) -> str:
        """The rollout's file-system name (see :mod:`osmo_run.sdk.names`)."""
        return self.request.safe_name if self.request is not None else safe_name(self.row.row_id)


def work_items(
    rows: Iterable[DatasetRow],
    samples_per_row: int = 1,
    skip: Callable[[int, int], bool] | None = None,
    earlier: Callable[[int, int], list[dict[str, Any]] | None] | None = None,
) -> Iterator[WorkItem]:
    """Every ``(row, sample)`` to run, in dataset order, leaving out those ``skip(row_index,
    sample_index)`` says are done; ``earlier(row_index, sample_index)`` gives the attempts
    an earlier invocation recorded for one that runs again."""
    for row in rows:
        for sample_index in range(samples_per_row):
            if skip is not None and skip(row.index, sample_index):
                continue
            request = row.request
            if request is not None and samples_per_row > 1:
                name = rollout_name(request.safe_name, sample_index)
                request = dataclasses.replace(request, id=f"{request.id}~{sample_index}", name=name)
            before = earlier(row.index, sample_index) if earlier is not None else None
            yield WorkItem(row, sample_index, request, before)


@dataclass
class _Flight:
    item: WorkItem
    started: float
    recorded: bool = False


class Runner:
    """Runs work items through ``backend`` and records each exactly once.

    A failed attempt whose category ``retry`` covers is tried again after a backoff; the
    record keeps the earlier attempts. ``breaker`` (none: never) sees every final result;
    once it trips no further item is dispatched, the items in flight run to their end
    (without retrying the failure it tripped on) and the summary's ``breaker`` says why.
    ``writer`` errors (:class:`~osmo_run.errors.OutputError`) stop the run: nothing is
    dispatched after the first failed write, and the error propagates from :meth:`run`.
    """

    def __init__(
        self,
        backend: ExecutionBackend,
        writer: OutputWriter,
        display: Display,
        window: int | None = None,
        retry: RetryPolicy = NO_RETRIES,
        stats: SummaryBuilder | None = None,
        fail_fast: bool = False,
        breaker: Breaker | None = None,
    ) -> None:
        self._backend = backend
        self._writer = writer
        self._display = display
        self._window = window or backend.max_concurrency or DEFAULT_WINDOW
        self._retry = retry
        self._stats = stats or SummaryBuilder()
        self._flights: dict[str, _Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._interrupted = False
        self._fail_fast = fail_fast
        self._stopped_early = False
        self._fatal: BaseException | None = None
        self._wake: asyncio.Event | None = None
        self._breaker = breaker
        self._halt: asyncio.Event | None = None
        """Set when the breaker trips: wakes rows waiting to retry."""
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

    def _record(
        self,
        flight: _Flight,
        result: ExecutionResult,
        attempt: int = 1,
        attempts: list[dict[str, Any]] | None = None,
        masked: bool = False,
    ) -> None:
        """Write ``result`` as ``flight``'s row (once), its error masked unless ``masked``
        says that was done (before a retry that was then called off)."""
        if flight.recorded:
            return
        flight.recorded = True
        item = flight.item
        row = item.row
        if not result.timings.total_sec:
            result.timings.total_sec = time.monotonic() - flight.started
        if not masked:  # the display prints it too: mask secrets there as well
            self._mask_error(result)
        self._keep_diagnostics(result, item)

        def serialize(result: ExecutionResult) -> tuple[dict[str, Any], str]:
            record = record_dict(
                row.row_id,
                row.index,
                row.line,
                result,
                item.sample_index,
                attempt,
                attempts,
                item.safe_name,
            )
            record = self._writer.mask_record(record)
            return record, record_line(record)

        try:
            record, line = serialize(result)
        except (ValueError, TypeError, RecursionError) as exc:  # NaN, a cycle, a non-str key
            result = _unwritable(result, exc)
            record, line = serialize(result)
        try:
            self._writer.write(line)
        except BaseException as exc:
            self._fatal = exc
            self.interrupt()
            return
        self._stats.add_record(record)
        self._display.row_finished(result)
        if self._fail_fast and not result.ok and not self._stopped_early:
            self._stopped_early = True  # dispatch stops; rows in flight still finish
            self._display.message("fail-fast: a rollout failed; no further rows are started")
        if self._breaker is not None:
            self._watch(self._breaker, result, row.row_id)

    def _mask_error(self, result: ExecutionResult) -> None:
        """Mask the secrets in ``result``'s error, once (a secret may be ``*``): in the full
        text first, then cut the message from it again. The message was cut from the
        unmasked text, so it can hold the first line of a multi-line secret, or the part of
        a long one before the cut, which no longer match the secret."""
        if result.error_detail:
            result.error_detail = self._writer.mask(result.error_detail)
            result.error_message = short_message(result.error_detail)
        elif result.error_message:
            result.error_message = self._writer.mask(result.error_message)

    def _keep_diagnostics(self, result: ExecutionResult, item: WorkItem) -> None:
        """A message cut to one line has its full text (masked already) written to a
        file."""
        if result.error_detail:
            errors = RunPaths(self._writer.path).errors
            keep_full_error(result, errors, item.safe_name, _as_it_is)

    async def _scrub_kept(self, result: ExecutionResult) -> None:
        """Mask the run's secrets in the files of a directory the backend kept for the
        attempt (a trial's), in a thread: a trial's logs can be large, and the loop drives
        every other row meanwhile."""
        kept = result.backend.get("trial_dir")
        if isinstance(kept, str) and self._writer.secrets:
            scrub = functools.partial(scrub_directory, Path(kept), self._writer.secrets)
            result.warnings.extend(await asyncio.get_running_loop().run_in_executor(None, scrub))

    def _watch(self, breaker: Breaker, result: ExecutionResult, row_id: str) -> None:
        """Show ``result`` to the breaker; when it trips, stop dispatching (the rows in
        flight, this one's recording aside, finish and are recorded) and say so."""
        trip = breaker.observe(result, row_id)
        if trip is None:
            return
        self._stopped_early = True
        trip.in_flight = sum(1 for f in self._flights.values() if not f.recorded)
        if self._halt is not None:
            self._halt.set()
        waiting = f"; waiting for the {trip.in_flight} in flight" if trip.in_flight else ""
        self._display.message(
            f"breaker: {trip.after} rollouts in a row failed with {trip.category} "
            f"({trip.message}); no further rows are started{waiting}"
        )

    def _budget_spent(self) -> bool:
        """Whether the run's model budget is spent: then no further row starts (it could
        send no model call), the rows in flight finish, and the run says so once."""
        layer = current_model_layer()
        if layer is None or layer.budget is None or not layer.budget.spent:
            return False
        if not self._stopped_early:
            self._stopped_early = True
            self._display.message(
                f"budget: {layer.budget.reached()} reached; no further model call is sent "
                "and no further rows are started"
            )
        return True

    def _halted_on(self, result: ExecutionResult, item: WorkItem) -> bool:
        """Whether the breaker has tripped on the cause ``result`` failed with (retrying it
        would learn nothing new)."""
        return self._breaker is not None and self._breaker.matches(result, item.row.row_id)

    def _retry_delay(self, result: ExecutionResult, tries: int, waited: float) -> float | None:
        """The wait before the run-level retry of ``result`` (its ``tries``-th failure, after
        ``waited`` seconds of earlier waits): the policy's backoff, or longer when a model
        endpoint asked to wait (``Retry-After`` in the message's retry note); ``None``, with
        a warning on the row saying why, when that is longer than the policy ever waits."""
        delay = self._retry.delay_sec(tries)
        asked = asked_wait_sec(result.error_detail or result.error_message or "")
        if asked is None or asked <= delay:
            return delay
        policy = self._retry
        if asked > policy.max_backoff_sec or waited + asked > policy.max_total_retry_sec:
            result.warnings.append(
                f"not retried: the model endpoint asked to wait {asked:g}s (Retry-After), "
                f"longer than retries: waits ({policy.max_backoff_sec:g}s at most, "
                f"{policy.max_total_retry_sec:g}s in all)"
            )
            return None
        return asked

    async def _backoff(self, delay: float) -> None:
        """Wait ``delay`` seconds before a retry, or until the breaker trips."""
        if self._halt is None:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._halt.wait(), delay)

    async def _attempt(self, item: WorkItem) -> ExecutionResult:
        """One try of ``item`` through the backend; its final result."""
        assert item.request is not None
        final: asyncio.Future[ExecutionResult] = asyncio.get_running_loop().create_future()

        def deliver(result: ExecutionResult) -> None:
            if not final.done():
                final.set_result(result)

        def on_workflow_complete(result: ExecutionResult) -> None:
            if result.status is RolloutStatus.GRADING:
                self._display.row_phase(item.rollout_id, ProgressPhase.GRADING)
            else:
                deliver(result)

        try:
            await self._backend.execute(item.request, on_workflow_complete, deliver)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = f"the backend failed: {type(exc).__name__}: {exc}"
            deliver(ExecutionResult.failure(item.rollout_id, ErrorCategory.INTERNAL_ERROR, message))
        if not final.done():
            message = "the backend returned without a result (a backend bug)"
            deliver(ExecutionResult.failure(item.rollout_id, ErrorCategory.INTERNAL_ERROR, message))
        return final.result()

    async def _run_one(self, flight: _Flight) -> None:
        item = flight.item
        attempts: list[dict[str, Any]] = list(item.earlier or [])
        first = attempt = len(attempts) + 1  # a rerun continues an earlier run's count
        waited = 0.0
        masked = False
        try:
            if item.request is None:
                bad_row = ExecutionResult.failure(
                    item.rollout_id, ErrorCategory.VALIDATION_ERROR, item.row.error
                )
                self._record(flight, bad_row)
                return
            while True:
                result = await self._attempt(item)
                await self._scrub_kept(result)
                tries = attempt - first + 1  # the retry policy counts this invocation's
                if (
                    self._interrupted
                    or not self._retry.retries(result.error_category, tries, waited)
                    or self._halted_on(result, item)
                ):
                    break
                delay = self._retry_delay(result, tries, waited)
                if delay is None:
                    break
                self._mask_error(result)  # shown by the display before it is recorded
                attempts.append(attempt_dict(attempt, result))
                attempt += 1
                self._display.row_retrying(
                    item.rollout_id, tries + 1, self._retry.max_attempts, delay, result
                )
                await self._backoff(delay)
                if self._halted_on(result, item):  # tripped meanwhile: record this failure
                    attempts.pop()
                    attempt -= 1
                    masked = True
                    break
                waited += delay
                flight.started = time.monotonic()
            self._record(flight, result, attempt, attempts, masked)
        except asyncio.CancelledError:
            self._record(flight, _cancelled(item), attempt, attempts)
        except Exception as exc:  # a bug in recording: the run must not end as if it passed
            self._fatal = exc
            self.interrupt()
        finally:
            self._flights.pop(item.rollout_id, None)
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

    async def run(self, items: Iterable[WorkItem]) -> RunSummary:
        """Run every item (until interrupted) and return the summary of the whole run."""
        self._wake = asyncio.Event()
        self._halt = asyncio.Event()
        ticker = asyncio.create_task(self._ticker())
        try:
            for item in items:
                while len(self._tasks) >= self._window and not self._interrupted:
                    self._wake.clear()
                    await self._wake.wait()
                if self._interrupted or self._stopped_early or self._budget_spent():
                    break
                flight = _Flight(item, time.monotonic())
                self._flights[item.rollout_id] = flight
                self._display.row_started(item.rollout_id)
                task = start_task(self._run_one(flight))
                if not task.done():  # an eager task may have finished already
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            await self._drain()
        finally:
            ticker.cancel()
        if self._fatal is not None:
            raise self._fatal
        summary = self._stats.build(output=str(self._writer.path), interrupted=self._interrupted)
        summary.stopped_early = self._stopped_early
        summary.breaker = None if self._breaker is None else self._breaker.tripped
        return summary

    async def _drain(self) -> None:
        """Wait for in-flight rows; after an interrupt, give them ``INTERRUPT_GRACE_SEC`` (or
        the backend's ``cancel_grace_sec`` when longer)."""
        assert self._wake is not None
        while self._tasks and not self._interrupted:
            self._wake.clear()
            await self._wake.wait()
        if not self._tasks:
            return
        grace = max(INTERRUPT_GRACE_SEC, self._backend.cancel_grace_sec)
        _, still_running = await asyncio.wait(set(self._tasks), timeout=grace)
        abandoned_after = grace if still_running else None
        for flight in list(self._flights.values()):
            self._record(flight, _cancelled(flight.item, abandoned_after))


def _unwritable(result: ExecutionResult, exc: BaseException) -> ExecutionResult:
    """The failure recorded instead of a result that JSON cannot hold; the run goes on."""
    message = (
        f"the result cannot be written as JSON ({type(exc).__name__}: {exc}); "
        "messages, metrics and info must hold JSON values (no NaN, no cycles)"
    )
    phase = result.error_phase or Phase.WORKFLOW
    unwritable = ExecutionResult.failure(
        result.rollout_id, ErrorCategory.VALIDATION_ERROR, message, phase
    )
    unwritable.timings = result.timings
    return unwritable


def _cancelled(item: WorkItem, abandoned_after_sec: float | None = None) -> ExecutionResult:
    message = "the run was interrupted before this row finished"
    if abandoned_after_sec is not None:
        message += f"; it did not stop within {abandoned_after_sec:g}s and was abandoned"
    return ExecutionResult.failure(item.rollout_id, ErrorCategory.CANCELLED, message, None)
