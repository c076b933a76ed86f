"""Drive a dataset through a backend: dispatch, record, display, summarize.

The runner is the same for every backend. It keeps at most ``window`` rows in flight
(so memory does not grow with the dataset), writes each finished row to the output at
once, and on :meth:`Runner.interrupt` stops dispatching and records in-flight rows as
cancelled. When its :class:`~osmo_run.run.controls.breaker.Breaker` trips (rollouts in a row failing
with one systemic cause) it stops dispatching too, but lets the rows in flight finish and
records them as they end; only their retries of that same failure are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from osmo_run.backends.base import ExecutionBackend
from osmo_run.run.controls.breaker import Breaker
from osmo_run.run.controls.retry import NO_RETRIES, RetryPolicy
from osmo_run.run.executing.display import Display
from osmo_run.run.reading.dataset import DatasetRow
from osmo_run.run.reporting.summary import RunSummary, SummaryBuilder
from osmo_run.run.writing.full_errors import keep_full_error
from osmo_run.run.writing.output import OutputWriter
from osmo_run.run.writing.records import attempt_dict, record_dict
from osmo_run.run.writing.runfiles import RunPaths
from osmo_run.run.writing.scrub import scrub_directory
from osmo_run.sdk.deadlines import CANCEL_GRACE_SEC, INTERRUPT_GRACE_SEC
from osmo_run.sdk.messages import short_message
from osmo_run.sdk.model_layer import current_model_layer
from osmo_run.sdk.model_retry import asked_wait_sec
from osmo_run.sdk.names import rollout_name, safe_name
from osmo_run.sdk.phase_deadline import PhaseAbandoned
from osmo_run.sdk.rollout import shallow_result, start_task
from osmo_run.sdk.types import (
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    Phase,
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


class _Flight:
    """One rollout from its dispatch to its record: the worker running it, its attempts so
    far (a rerun continues an earlier invocation's count) and the reason it was cancelled
    (:meth:`Runner.cancel`)."""

    __slots__ = (
        "attempt",
        "attempts",
        "cancelled",
        "first",
        "item",
        "recorded",
        "started",
        "waited",
        "worker",
    )

    def __init__(self, item: WorkItem, started: float) -> None:
        self.item = item
        self.started = started
        self.recorded = False
        self.worker: asyncio.Task[None] | None = None
        self.cancelled: str | None = None
        earlier = item.earlier
        self.attempts: list[dict[str, Any]] = list(earlier) if earlier else []
        self.first = self.attempt = len(self.attempts) + 1
        self.waited = 0.0


@runtime_checkable
class WorkSource(Protocol):
    """Items that arrive while the run goes on (a server's admissions), taken by any
    number of free workers at once: ``take`` returns the next item, waiting for one, and
    ``None`` once the source has ended; each item goes to exactly one taker, and a taker
    cancelled while it waits loses nothing.

    Prefer it to an async iterable, which the workers draw one at a time (each waits for
    the one before it to get its item): one item per event-loop turn, so a burst of
    arrivals on a busy loop starts slowly while the window's other workers sit idle."""

    async def take(self) -> WorkItem | None: ...


OnRecorded = Callable[[WorkItem, ExecutionResult, dict[str, Any]], None]
"""Called with a rollout's item, final result and record (as written, secrets masked)."""


class Runner:
    """Runs work items through ``backend`` and records each exactly once.

    ``window`` workers (default: the backend's ``max_concurrency``, or
    :data:`DEFAULT_WINDOW` when it sets none) each take the next item and run it to its
    record, its phases in the worker's own task (:meth:`ExecutionBackend.run_rollout`).
    A worker stuck in code that ignores its deadline's cancellation is left behind and a
    fresh one carries on with that row's timeout and the rest of the items.

    A failed attempt whose category ``retry`` covers is tried again after a backoff; the
    record keeps the earlier attempts. ``breaker`` (none: never) sees every final result;
    once it trips no further item is dispatched, the items in flight run to their end
    (without retrying the failure it tripped on) and the summary's ``breaker`` says why.
    ``writer`` errors (:class:`~osmo_run.errors.OutputError`) stop the run: nothing is
    dispatched after the first failed write, and the error propagates from :meth:`run`.
    ``on_recorded(item, result, record)`` is called once per rollout right after its
    record is written, on the loop's thread.
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
        on_recorded: OnRecorded | None = None,
    ) -> None:
        self._backend = backend
        self._writer = writer
        self._display = display
        self._window = window or backend.max_concurrency or DEFAULT_WINDOW
        self._retry = retry
        self._stats = stats or SummaryBuilder()
        self._flights: dict[str, _Flight] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._interrupted = False
        self._fail_fast = fail_fast
        self._stopped_early = False
        self._fatal: BaseException | None = None
        self._breaker = breaker
        self._on_recorded = on_recorded
        self._halt: asyncio.Event | None = None
        """Set when the breaker trips: wakes rows waiting to retry."""
        self._items: Iterator[WorkItem] | None = None
        self._async_items: AsyncIterator[WorkItem] | None = None
        self._taking: asyncio.Lock | None = None
        """Held while a worker awaits the next item of an async iterable (one at a time)."""
        self._source: WorkSource | None = None
        self._ended: asyncio.Future[None] | None = None
        """Done when the last worker has ended (or on an interrupt)."""
        backend.set_progress_listener(display.row_phase)

    @property
    def interrupted(self) -> bool:
        return self._interrupted

    def interrupt(self) -> None:
        """Stop dispatching and cancel in-flight rows (they are recorded as cancelled)."""
        if self._interrupted:
            return
        self._interrupted = True
        for worker in list(self._workers):
            worker.cancel()
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    def cancel(self, rollout_id: str, reason: str) -> bool:
        """Cancel the rollout ``rollout_id`` if it is in flight (running, or waiting to
        retry): it is recorded once as ``cancelled`` with ``reason`` as its message, and its
        worker goes on with the next item. ``False`` when the id is not known here (never
        dispatched, or recorded already). Other rows are untouched."""
        flight = self._flights.get(rollout_id)
        if flight is None or flight.recorded or flight.worker is None:
            return False
        if flight.cancelled is None:
            flight.cancelled = reason
            flight.worker.cancel()
        return True

    def _record(
        self,
        flight: _Flight,
        result: ExecutionResult,
        attempt: int = 1,
        attempts: list[dict[str, Any]] | None = None,
        masked: bool = False,
    ) -> None:
        """Write ``result`` as ``flight``'s row (once), its error masked unless ``masked``
        says that was done (before a retry that was then called off). What is recorded
        (its time, its masked error, where its full error and turns went) is a copy:
        ``result`` stays as its backend delivered it, for whoever kept it."""
        if flight.recorded:
            return
        flight.recorded = True
        item = flight.item
        row = item.row
        if not result.timings.total_sec or result.error_message or result.turns:
            # what is changed below, on a copy (not a deep one: only its own fields change);
            # a timed success without turns, the common row, is written as it is
            result = shallow_result(result)
        if not result.timings.total_sec:
            result.timings.total_sec = time.monotonic() - flight.started
        if not masked:  # the display prints it too: mask secrets there as well
            self._mask_error(result)
        self._keep_diagnostics(result, item)

        def serialize(result: ExecutionResult) -> str:
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
            return self._writer.record_line(record)  # secrets masked

        try:
            line = serialize(result)
        except (ValueError, TypeError, RecursionError) as exc:  # NaN, a cycle, a non-str key
            result = _unwritable(result, exc)
            line = serialize(result)
        try:
            turns = self._writer.turns
            if result.turns and turns is not None:
                # before its result: the result line commits both, so a run stopped
                # between the two leaves a rollout --resume runs again, never a kept
                # result whose turns are gone (an orphan turns line is dropped then)
                result.turns = turns.write(result.rollout_id, result.turns)  # as written
            self._writer.write(line)
        except BaseException as exc:
            self._fatal = exc
            self.interrupt()
            return
        skipped = result.grader_skipped  # the summary counts it as written: masked
        self._stats.add_result(result, row.index, skipped and self._writer.mask(skipped))
        if self._on_recorded is not None:  # the record as written: the secrets masked
            self._on_recorded(item, result, json.loads(line))
        self._display.row_finished(result)
        if self._fail_fast and not result.ok and not self._stopped_early:
            self._stopped_early = True  # dispatch stops; rows in flight still finish
            self._display.message("fail-fast: a rollout failed; no further rows are started")
        if self._breaker is not None:
            self._watch(self._breaker, result, row.row_id)

    def _mask_error(self, result: ExecutionResult) -> None:
        """Mask the secrets in ``result``'s error in place (a result of the runner's own,
        never a backend's), once (a secret may be ``*``): in the full
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

    async def _scrub_kept(self, result: ExecutionResult) -> ExecutionResult:
        """Mask the run's secrets in the files of a directory the backend kept for the
        attempt (a trial's), in a thread: a trial's logs can be large, and the loop drives
        every other row meanwhile. ``result``, or a copy with what the scrub warned of."""
        kept = result.backend.trial_dir
        if kept is None or not self._writer.secrets:
            return result
        scrub = functools.partial(scrub_directory, Path(kept), self._writer.secrets)
        warnings = await asyncio.get_running_loop().run_in_executor(None, scrub)
        if not warnings:
            return result
        result = shallow_result(result)
        result.warnings.extend(warnings)
        return result

    def _watch(self, breaker: Breaker, result: ExecutionResult, row_id: str) -> None:
        """Show ``result`` to the breaker; when it trips, stop dispatching (the rows in
        flight, this one's recording aside, finish and are recorded) and say so."""
        in_flight = len(self._flights) - 1  # the others: a flight leaves once recorded
        trip = breaker.observe(result, row_id, in_flight=in_flight)
        if trip is None:
            return
        self._stopped_early = True
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
                f"budget: {layer.budget.reached()}; no further model call is sent "
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

    async def _attempt(self, flight: _Flight) -> ExecutionResult:
        """One try of ``flight``'s item through the backend; its final result."""
        item = flight.item
        assert item.request is not None
        try:
            return await self._backend.run_rollout(
                item.request, functools.partial(self._abandoned, flight)
            )
        except (asyncio.CancelledError, PhaseAbandoned):
            raise
        except Exception as exc:
            message = f"the backend failed: {type(exc).__name__}: {exc}"
            return ExecutionResult.failure(item.rollout_id, ErrorCategory.INTERNAL_ERROR, message)

    def _abandoned(self, flight: _Flight, result: ExecutionResult) -> None:
        """``flight``'s worker is stuck in code that ignored its deadline's cancellation:
        leave it behind, and let a fresh worker go on with ``result`` (the timeout) and then
        with the rest of the items."""
        stuck = flight.worker
        if flight.recorded or stuck is None or self._interrupted:
            return
        self._workers.discard(stuck)
        flight.worker = None
        self._spawn(flight, result)

    def _spawn(self, flight: _Flight | None = None, result: ExecutionResult | None = None) -> None:
        worker = start_task(self._work(flight, result))
        self._workers.add(worker)
        if worker.done():  # an eager task may have ended already
            self._worker_ended(worker)
        else:
            worker.add_done_callback(self._worker_ended)

    def _worker_ended(self, worker: asyncio.Task[None]) -> None:
        self._workers.discard(worker)
        if not self._workers and self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    async def _work(self, flight: _Flight | None, result: ExecutionResult | None) -> None:
        """A worker: ``flight`` first (continued from ``result``, when a stuck worker left
        it), then item after item until there are none, the run stops dispatching, or it
        is interrupted."""
        me = asyncio.current_task()
        try:
            if flight is not None:
                flight.worker = me
                await self._run_one(flight, result)
            items = self._items
            while not (self._interrupted or self._stopped_early or self._budget_spent()):
                if items is not None:
                    try:
                        item = next(items, None)
                    except Exception as exc:  # reading the dataset failed: the run ends
                        self._fail(exc)
                        return
                else:
                    item = await self._next_async()
                if item is None:
                    return
                flight = _Flight(item, time.monotonic())
                flight.worker = me
                self._flights[item.rollout_id] = flight
                self._display.row_started(item.rollout_id)
                await self._run_one(flight, None)
        except PhaseAbandoned:
            return  # a fresh worker took over this one's row and items

    def _fail(self, exc: BaseException) -> None:
        """End the run with ``exc`` now (it propagates from :meth:`run`)."""
        if self._fatal is None:
            self._fatal = exc
        self._stopped_early = True
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    async def _next_async(self) -> WorkItem | None:
        """The next item of the async iterable or :class:`WorkSource` ``run`` was given;
        ``None`` at its end."""
        if self._source is not None:
            if self._interrupted or self._stopped_early:
                return None
            try:
                return await self._source.take()
            except Exception as exc:
                self._fail(exc)
                return None
        assert self._async_items is not None and self._taking is not None
        async with self._taking:
            if self._interrupted or self._stopped_early:
                return None
            try:
                return await anext(self._async_items)
            except StopAsyncIteration:
                return None
            except Exception as exc:
                self._fail(exc)
                return None

    async def _run_one(self, flight: _Flight, result: ExecutionResult | None) -> None:
        """Run ``flight`` to its record: attempt, retry while the policy says so, record.
        ``result``: the outcome of an attempt made already (by a worker left behind)."""
        item = flight.item
        masked = False
        try:
            if item.request is None:
                bad_row = ExecutionResult.failure(
                    item.rollout_id, ErrorCategory.VALIDATION_ERROR, item.row.error
                )
                self._record(flight, bad_row)
                return
            while True:
                if result is None:
                    result = await self._attempt(flight)
                if result.backend.trial_dir is not None:
                    result = await self._scrub_kept(result)
                tries = flight.attempt - flight.first + 1  # the policy counts this invocation's
                if (
                    self._interrupted
                    or not self._retry.retries(result.error_category, tries, flight.waited)
                    or self._halted_on(result, item)
                ):
                    break
                delay = self._retry_delay(result, tries, flight.waited)
                if delay is None:
                    break
                result = shallow_result(result)  # the backend's stays as delivered
                self._mask_error(result)  # shown by the display before it is recorded
                flight.attempts.append(attempt_dict(flight.attempt, result))
                flight.attempt += 1
                self._display.row_retrying(
                    item.rollout_id, tries + 1, self._retry.max_attempts, delay, result
                )
                await self._backoff(delay)
                if self._halted_on(result, item):  # tripped meanwhile: record this failure
                    flight.attempts.pop()
                    flight.attempt -= 1
                    masked = True
                    break
                flight.waited += delay
                flight.started = time.monotonic()
                result = None
            self._record(flight, result, flight.attempt, flight.attempts, masked)
        except asyncio.CancelledError:
            reason = flight.cancelled
            worker = asyncio.current_task()
            if reason is None or worker is None or self._interrupted:
                self._record(flight, _cancelled(item), flight.attempt, flight.attempts)
                raise
            if worker.uncancel():  # cancelled for another reason too: an interrupt
                self._record(flight, _cancelled(item), flight.attempt, flight.attempts)
                raise
            cancelled = ExecutionResult.failure(
                item.rollout_id, ErrorCategory.CANCELLED, reason, None
            )
            self._record(flight, cancelled, flight.attempt, flight.attempts)
        except PhaseAbandoned:
            raise
        except Exception as exc:  # a bug in recording: the run must not end as if it passed
            self._fatal = exc
            self.interrupt()
        finally:
            if flight.worker is asyncio.current_task():
                self._flights.pop(item.rollout_id, None)

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self._display.tick()

    async def run(
        self, items: Iterable[WorkItem] | AsyncIterable[WorkItem] | WorkSource
    ) -> RunSummary:
        """Run every item (until interrupted) and return the summary of the whole run.

        ``items`` may be an async iterable or a :class:`WorkSource`: a free worker awaits
        its next item, and the run ends when it ends (or on an interrupt)."""
        loop = asyncio.get_running_loop()
        self._halt = asyncio.Event()
        self._ended = loop.create_future()
        if isinstance(items, WorkSource):
            self._source = items
        elif isinstance(items, AsyncIterable):
            self._async_items = aiter(items)
            self._taking = asyncio.Lock()
        else:
            self._items = iter(items)
        ticker = asyncio.create_task(self._ticker())
        try:
            for _ in range(self._window):
                if self._interrupted or self._stopped_early:
                    break
                self._spawn()
            if self._workers and not self._ended.done():
                await self._ended
            if self._fatal is None or self._interrupted:
                await self._drain()
        finally:
            ticker.cancel()
        if self._fatal is not None:
            raise self._fatal
        return self._stats.build(
            output=str(self._writer.path),
            interrupted=self._interrupted,
            stopped_early=self._stopped_early,
            breaker=None if self._breaker is None else self._breaker.tripped,
        )

    async def _drain(self) -> None:
        """After an interrupt, give the rows in flight ``INTERRUPT_GRACE_SEC`` (or the
        backend's ``cancel_grace_sec`` when longer) to be recorded; record the rest as
        abandoned. A backend that runs rows' code in the workers themselves
        (``runs_code_in_caller``) gets ``CANCEL_GRACE_SEC``: a row still running then is
        code ignoring the cancellation, left behind and recorded as interrupted, as a phase
        ignoring its deadline is."""
        if not self._workers:
            return
        if self._backend.runs_code_in_caller:
            await asyncio.wait(set(self._workers), timeout=CANCEL_GRACE_SEC)
            for flight in list(self._flights.values()):
                self._record(flight, _cancelled(flight.item))
            return
        grace = max(INTERRUPT_GRACE_SEC, self._backend.cancel_grace_sec)
        _, still_running = await asyncio.wait(set(self._workers), timeout=grace)
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
