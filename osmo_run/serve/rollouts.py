"""The served rollouts: admission, the queue the runner draws from, long-polls, cancels,
lease expiry and retention. Plain classes on the event loop's thread (no locks: nothing
here awaits between reading and changing state, long-polls aside).

A rollout is *queued* from admission until the runner takes it from :meth:`items`, then
*running* (and *grading*, when its grader starts) until the runner records it; its wire
answer can then be read for ``retention_sec``. A finished rollout keeps little in memory
(issue 23: a server's memory stays flat over tens of thousands of rollouts): its answer
is held until it is first read, then only where its results line is (:class:`KeptAt`),
which a later read (a trainer reconnecting) reads back and answers with, byte for byte
the first body.

The runner records every admitted rollout exactly once, a cancelled one included: a
rollout cancelled while queued is handed to the runner ahead of the queue and ends at
once as ``cancelled`` (:class:`StartGate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from osmo_run.errors import OutputError
from osmo_run.run.controls.breaker import Breaker
from osmo_run.run.executing.runner import Runner, WorkItem
from osmo_run.run.reading.dataset import DatasetRow
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.names import safe_name
from osmo_run.sdk.types import ExecutionRequest, ExecutionResult, RolloutStatus
from osmo_run.serve.admission import DrainRate, retry_after_sec
from osmo_run.serve.leases import Lease, lease_matches, new_lease
from osmo_run.serve.metrics import ServeMetrics
from osmo_run.serve.protocol import (
    LEASE_EXPIRED_MESSAGE,
    BadBody,
    BatchItem,
    RolloutRequest,
    admission_answer,
    cancelled_answer,
    lease_expired_answer,
    progress_answer,
    wire_result,
)

DEFAULT_MODEL_NAME = "osmosis-rollout"
"""The model name sent to a request's endpoint when the spec names none (osmosis's own)."""

CANCELLED_MESSAGE = "cancelled by POST /rollout/cancel"


def request_fields(request: RolloutRequest) -> dict[str, Any]:
    """What a results line keeps of a request: everything but the prompt (the sample holds
    it) and the model key (a secret)."""
    return {
        "label": request.label,
        "metadata": request.metadata,
        "grade": request.grade,
        "agent_timeout_sec": request.agent_timeout_sec,
        "grader_timeout_sec": request.grader_timeout_sec,
        "chat_completions_url": request.chat_completions_url,
        "extra_fields": request.extra_fields,
    }


class Refused(Exception):
    """A request the server answers with an error status: ``status``, the one-line
    ``detail`` and any headers (``Retry-After``)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}


@dataclass(frozen=True, slots=True)
class KeptAt:
    """Where a finished rollout's answer is on disk: its results line, and its turns line
    (``llm.capture: tokens``, when it captured calls), as byte offsets and lengths (the
    newline included); ``turns_len`` 0 for none."""

    line_at: int
    line_len: int
    turns_at: int = 0
    turns_len: int = 0


class ResultLines(Protocol):
    """The run's results file as the served rollouts see it
    (:class:`~osmo_run.serve.backend.ServedWriter`)."""

    def kept_at(self, with_turns: bool) -> KeptAt | None:
        """Where the results line written last is (and, ``with_turns``, the turns line
        written last); ``None`` when nothing was written."""

    def read_back(self, kept: KeptAt) -> tuple[Any, Any]:
        """The record the results line at ``kept`` holds (decoded), and its turns line's
        ``turns`` (``None`` without one). Raises ``OSError`` or ``ValueError`` when the
        lines cannot be read."""


@dataclass(eq=False, slots=True)
class Served:
    """One admitted rollout. Slots, and only what its state needs: every finished
    rollout stays one of these for ``retention_sec``."""

    rollout_id: str
    lease: Lease
    label: str | None
    item: WorkItem | None
    """What the runner runs; dropped once the rollout is recorded (its prompt is not kept)."""
    admitted_at: float
    status: RolloutStatus = RolloutStatus.QUEUED
    in_queue: bool = True
    answer: dict[str, Any] | None = None
    """The terminal wire body, once there is one, until it is first read when ``kept``
    says where to read it again."""
    kept: KeptAt | None = None
    """Where the results file holds the answer (a rollout the runner recorded)."""
    finished_at: float | None = None
    changed: asyncio.Event | None = None
    """Set at the next status change; made when a long-poll waits, dropped when set."""
    request: dict[str, Any] | None = None
    """What the results line keeps of the request (no prompt, no key); dropped once the
    line is written."""

    @property
    def ended(self) -> bool:
        """Whether the rollout has its terminal answer (finished, cancelled, expired)."""
        return self.answer is not None or self.kept is not None


@dataclass
class ServeSettings:
    """How the server admits and answers (osmosis's defaults)."""

    max_queued: int
    result_wait_sec: float = 30.0
    lease_sec: float = 120.0
    retention_sec: float = 900.0
    model_name: str = DEFAULT_MODEL_NAME
    agent_timeout_sec: float | None = None
    """Used when a request gives none (osmosis: unbounded)."""
    grader_timeout_sec: float | None = None
    capture_tokens: bool = False
    """The spec's ``llm.capture: tokens``: each rollout's calls to its request's endpoint
    are captured, and its terminal answer carries them as ``turns``."""


class StartGate:
    """Rollouts to end as cancelled instead of starting: the backend wrapper asks it before
    each rollout runs (see :class:`~osmo_run.serve.backend.ServedBackend`)."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def hold(self, rollout_id: str, reason: str) -> None:
        self._reasons[rollout_id] = reason

    def take(self, rollout_id: str) -> str | None:
        """The reason ``rollout_id`` must not start (once), or ``None``."""
        return self._reasons.pop(rollout_id, None)


class ServedRollouts:
    """Every rollout this server admitted, and the queue the runner draws from.

    ``add_secret`` receives each request's ``llm_api_key`` at admission (the run masks it
    everywhere). ``first_index`` numbers rollouts after those a resumed run recorded.
    ``journal`` receives each admission (the request without its key, the lease hash)
    before it is answered, for :meth:`readmit` after a crash.
    """

    def __init__(
        self,
        settings: ServeSettings,
        add_secret: Callable[[str], None],
        *,
        first_index: int = 0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        journal: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if settings.lease_sec <= settings.result_wait_sec:
            raise ValueError("the lease must outlast the result wait")
        self.settings = settings
        self._add_secret = add_secret
        self._journal = journal
        self._clock = clock
        self._wall_clock = wall_clock
        self._entries: dict[str, Served] = {}
        self._forgotten: set[str] = set()
        self._unrecorded: dict[str, Served] = {}
        """The admitted rollouts the runner has not recorded yet, oldest first: what the
        sweep checks leases of (a server keeps far more finished ones, for retention)."""
        self._recorded: deque[Served] = deque()
        """The recorded rollouts in the order they were recorded (their ``finished_at``):
        the sweep forgets them from the left once past retention."""
        """Ids whose results retention dropped: still taken (409), no longer readable."""
        self._names: dict[str, str] = {}
        """Safe name -> id: two ids of one file name would share an artifacts directory."""
        self._queue: deque[Served] = deque()
        self._queued = 0
        self._ahead: deque[WorkItem] = deque()
        """Rollouts cancelled while queued: handed to the runner first, to be recorded."""
        self._watchers: dict[str, list[asyncio.Future[None]]] = {}
        """Batch result polls waiting on a rollout's terminal answer, by its id."""
        self._waiters: deque[asyncio.Future[None]] = deque()
        """Free workers of the runner waiting in :meth:`take`, longest-waiting first."""
        self._ended = False
        self._refusal: str | None = None
        self._next_index = first_index
        self.on_admitted: Callable[[], None] | None = None
        """Told of each rollout admitted (or queued again on --resume): the display's total."""
        self.rerun_without_key: set[str] = set()
        """Rollouts queued again after a crash that had a model key, which was not kept."""
        self.gate = StartGate()
        self.breaker: Breaker | None = None
        """The run's breaker: once it has tripped, submissions are refused with its cause."""
        self.drain = DrainRate()
        self.metrics = ServeMetrics()
        self.runner: Runner | None = None
        self.lines: ResultLines | None = None
        """Where recorded answers are read again from; without it they stay in memory."""
        self.running = 0
        self.admitted = 0
        self.refused_full = 0
        self.lease_expiries = 0
        self.process_id = str(uuid.uuid4())
        self.instance_id = os.environ.get("OSMO_RUN_SERVE_INSTANCE_ID") or self.process_id

    # -- admission ---------------------------------------------------------------------

    def refuse_new(self, reason: str) -> None:
        """Answer every further submission 503 with ``reason`` (shutting down, breaker)."""
        if self._refusal is None:
            self._refusal = reason

    @property
    def accepting(self) -> bool:
        return self._refusal is None

    def admit(self, request: RolloutRequest) -> dict[str, Any]:
        """Admit ``request``; the 202 body. Raises :class:`Refused` (503 while refusing,
        409 for an id already admitted in this run, 429 when the queue is full)."""
        if self._refusal is None and self.breaker is not None and self.breaker.tripped:
            trip = self.breaker.tripped
            self.refuse_new(
                f"the breaker stopped this server: {trip.after} rollouts in a row failed "
                f"with {trip.category} ({trip.message}); fix the cause and restart it"
            )
        if self._refusal is not None:
            raise Refused(503, self._refusal)
        rollout_id = request.rollout_id
        if rollout_id in self._entries or rollout_id in self._forgotten:
            raise Refused(409, "rollout_id is already registered")
        name = safe_name(rollout_id)
        if self._names.get(name, rollout_id) != rollout_id:
            raise Refused(
                409, "rollout_id names the same artifacts directory as an admitted rollout's"
            )
        now = self._clock()
        if self._queued >= self.settings.max_queued:
            self.refused_full += 1
            oldest = 0.0 if self.drain.per_sec(now) else self._oldest_age(now)
            wait = retry_after_sec(self.drain, self._queued, self.settings.max_queued, oldest, now)
            raise Refused(429, "rollout queue is full; retry later", {"Retry-After": str(wait)})
        token, digest = new_lease()
        if request.llm_api_key:
            self._add_secret(request.llm_api_key)
        if self._journal is not None:
            try:
                self._journal(
                    {
                        "rollout_id": rollout_id,
                        "lease_sha256": digest,
                        "initial_messages": request.initial_messages,
                        "had_key": request.llm_api_key is not None,
                        **request_fields(request),
                    }
                )
            except OutputError as exc:
                raise Refused(503, f"cannot record the admission: {exc}") from None
        entry = Served(
            rollout_id,
            Lease(digest, self.settings.lease_sec, now),
            request.label,
            self._work_item(request),
            now,
            request=request_fields(request),
        )
        self._entries[rollout_id] = entry
        self._unrecorded[rollout_id] = entry
        self._names[name] = rollout_id
        self._queue.append(entry)
        self._queued += 1
        self.admitted += 1
        self._wake_one()
        if self.on_admitted is not None:
            self.on_admitted()
        return admission_answer(
            rollout_id, token, self.settings.result_wait_sec, self.settings.lease_sec
        )

    def admit_batch(self, items: list[BatchItem]) -> list[dict[str, Any]]:
        """Admit each item in order exactly as :meth:`admit` admits one request; each one's
        answer: ``{"rollout_id", "status": 202, "polling_lease_token"}``, or its refusal
        ``{"rollout_id", "status": 409|422|429|503, "detail"}`` (a 429 with its
        ``retry_after_sec``). After a 503, the items left are refused alike (the server
        stopped admitting, or could not record an admission)."""
        answers: list[dict[str, Any]] = []
        stopped: Refused | None = None
        for rollout_id, request in items:
            if isinstance(request, BadBody):
                answers.append({"rollout_id": rollout_id, "status": 422, "detail": str(request)})
                continue
            refusal = stopped
            if refusal is None:
                try:
                    admitted = self.admit(request)
                except Refused as exc:
                    refusal = exc
                    stopped = exc if exc.status == 503 else None
                else:
                    token = admitted["polling_lease_token"]
                    answers.append(
                        {"rollout_id": rollout_id, "status": 202, "polling_lease_token": token}
                    )
                    continue
            answer: dict[str, Any] = {
                "rollout_id": rollout_id,
                "status": refusal.status,
                "detail": refusal.detail,
            }
            if "Retry-After" in refusal.headers:
                answer["retry_after_sec"] = int(refusal.headers["Retry-After"])
            answers.append(answer)
        return answers

    def _work_item(self, request: RolloutRequest) -> WorkItem:
        settings = self.settings
        agent = request.agent_timeout_sec
        grader = request.grader_timeout_sec
        execution = ExecutionRequest(
            id=request.rollout_id,
            prompt=request.initial_messages,
            label=request.label,
            metadata=request.metadata or {},
            agent_timeout_sec=settings.agent_timeout_sec if agent is None else agent,
            grader_timeout_sec=settings.grader_timeout_sec if grader is None else grader,
            grade=request.grade,
            llm=LLMEndpoint(
                request.chat_completions_url,
                settings.model_name,
                request.llm_api_key,
                capture_tokens=settings.capture_tokens,
            ),
        )
        index = self._next_index
        self._next_index += 1
        row = DatasetRow(index, index, request.rollout_id, execution, explicit_id=True)
        return WorkItem(row, 0, execution)

    def _oldest_age(self, now: float) -> float:
        """Seconds since the oldest rollout still queued or running was admitted."""
        for entry in self._unrecorded.values():  # insertion order: oldest first
            if not entry.ended:
                return now - entry.admitted_at
        return 0.0

    # -- the runner's side -------------------------------------------------------------

    def _take_nowait(self) -> WorkItem | None:
        """The next rollout to run (cancelled ones first), taken off the queue; ``None``
        when nothing is queued."""
        if self._ahead:
            return self._ahead.popleft()
        while self._queue and not self._queue[0].in_queue:
            self._queue.popleft()  # cancelled while queued: already handed over
        if not self._queue:
            return None
        entry = self._queue.popleft()
        entry.in_queue = False
        self._queued -= 1
        assert entry.item is not None  # only recorded rollouts lose theirs
        return entry.item

    async def take(self) -> WorkItem | None:
        """The next rollout for a free worker of the runner, in admission order (cancelled
        ones first), waiting for one; ``None`` after :meth:`end` once nothing is left.

        Any number of workers may wait at once (the runner's
        :class:`~osmo_run.run.executing.runner.WorkSource`): each rollout queued wakes one
        waiter, so a burst of admissions starts in one event-loop turn instead of one
        rollout per turn (an async generator is drawn by one worker at a time)."""
        while True:
            item = self._take_nowait()
            if item is not None:
                return item
            if self._ended:
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.cancelled():
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                else:
                    self._wake_one()  # woken for a rollout it will not take: pass it on
                raise

    async def items(self) -> AsyncIterator[WorkItem]:
        """:meth:`take` as an async iterable (one taker at a time)."""
        while (item := await self.take()) is not None:
            yield item

    def _wake_one(self) -> None:
        """Wake the longest-waiting :meth:`take` (a rollout was queued)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def end(self) -> None:
        """No more rollouts: :meth:`take` returns ``None`` once what is queued is handed
        over."""
        self._ended = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def cancel_queued(self, reason: str) -> int:
        """Cancel every queued rollout (shutting down); how many."""
        queued = [e for e in self._queue if e.in_queue]
        for entry in queued:
            self._cancel_queued(entry, reason, cancelled_answer(entry.rollout_id, reason))
        return len(queued)

    def unstarted(self) -> list[WorkItem]:
        """The rollouts admitted but never handed to the runner (it stopped early: the
        breaker), taken out of the queue."""
        left = list(self._ahead)
        self._ahead.clear()
        for entry in self._queue:
            if entry.in_queue and entry.item is not None:
                entry.in_queue = False
                left.append(entry.item)
        self._queue.clear()
        self._queued = 0
        return left

    def started(self, rollout_id: str) -> None:
        """The backend started ``rollout_id``."""
        entry = self._entries.get(rollout_id)
        if entry is not None and not entry.ended:
            self.running += 1
            self._set_status(entry, RolloutStatus.RUNNING)

    def stopped(self, rollout_id: str) -> None:
        """The backend is done with ``rollout_id`` (started before)."""
        self.running = max(self.running - 1, 0)

    def grading(self, rollout_id: str) -> None:
        entry = self._entries.get(rollout_id)
        if entry is not None and not entry.ended:
            self._set_status(entry, RolloutStatus.GRADING)

    def recorded(self, item: WorkItem, result: ExecutionResult, record: dict[str, Any]) -> None:
        """The runner wrote ``item``'s line: its wire answer is final (a cancel's or a lapsed
        lease's answer, given earlier, stays)."""
        now = self._clock()
        self.drain.observe(now)
        self.metrics.recorded(result)
        entry = self._entries.get(item.rollout_id)
        if entry is None:
            return
        if not entry.ended:
            if entry.lease.lapsed(now):
                self.lease_expiries += 1
                entry.answer = lease_expired_answer(entry.rollout_id)
            else:  # from the record as written: the run's secrets masked
                entry.answer = wire_result(ExecutionResult.from_dict(record), entry.label)
                if self.settings.capture_tokens:  # as the turns file holds them: masked
                    entry.answer["turns"] = result.turns or []
                if self.lines is not None:  # the line just written is this rollout's
                    entry.kept = self.lines.kept_at(bool(result.turns))
        entry.finished_at = now
        entry.item = None
        entry.request = None  # its line is written
        if self._unrecorded.pop(entry.rollout_id, None) is not None:
            self._recorded.append(entry)
        self._set_status(entry, result.status)

    def _set_status(self, entry: Served, status: RolloutStatus) -> None:
        entry.status = status
        if entry.changed is not None:  # wakes the long-polls waiting for a change
            entry.changed.set()
            entry.changed = None
        if entry.ended:  # wakes the batched polls waiting on it
            for watcher in self._watchers.pop(entry.rollout_id, ()):
                if not watcher.done():
                    watcher.set_result(None)

    def restore(self, record: dict[str, Any], kept: KeptAt | None = None) -> bool:
        """Serve again a rollout a results file holds (``--resume``): its id stays taken and
        its answer readable with its original lease token for what is left of its retention
        (from the line's ``recorded_unix``), read back from ``kept`` (where ``record``'s
        line is) when given, else held in memory. A line past retention only keeps its id
        taken: a restart after days of serving holds no answer nobody may read. ``False``
        for a record without a lease hash, or an id restored already (its first line is
        kept)."""
        rollout_id = str(record.get("rollout_id"))
        digest = record.get("lease_sha256")
        if (
            not isinstance(digest, str)
            or rollout_id in self._entries
            or rollout_id in self._forgotten
        ):
            return False
        recorded = record.get("recorded_unix")
        age = 0.0
        if isinstance(recorded, (int, float)) and math.isfinite(recorded):
            # a line's time, not a NaN a hand (or hostile) edit left: a NaN age would keep
            # its answer, and every one recorded after it, from ever being forgotten
            age = max(self._wall_clock() - recorded, 0.0)
        if age >= self.settings.retention_sec:
            self._forgotten.add(rollout_id)
            self._names[safe_name(rollout_id)] = rollout_id
            return True
        now = self._clock()
        request = record.get("request") if isinstance(record.get("request"), dict) else {}
        label = request.get("label") if isinstance(request, dict) else None
        result = ExecutionResult.from_dict(record)
        entry = Served(
            rollout_id,
            Lease(digest, self.settings.lease_sec, now),
            label if isinstance(label, str) else None,
            None,
            now,
            status=result.status,
            in_queue=False,
            finished_at=now - age,
        )
        if kept is not None and self.lines is not None:
            entry.kept = kept
        else:
            entry.answer = wire_result(result, entry.label)
            if self.settings.capture_tokens:
                entry.answer["turns"] = []  # until restore_turns finds its line
        self._entries[rollout_id] = entry
        self._recorded.append(entry)
        self._names[safe_name(rollout_id)] = rollout_id
        return True

    def restored(self, rollout_id: str) -> bool:
        """Whether ``rollout_id`` was restored with its answer (``--resume``)."""
        entry = self._entries.get(rollout_id)
        return entry is not None and entry.ended

    def restore_turns(
        self, rollout_id: str, turns: list[dict[str, Any]], at: tuple[int, int] | None = None
    ) -> None:
        """Give a restored rollout's answer the ``turns`` its turns-file line holds; ``at``
        is where that line is (offset, length), for an answer read back from the files."""
        entry = self._entries.get(rollout_id)
        if entry is None or not isinstance(turns, list):
            return
        if entry.kept is not None and at is not None:
            line_at, line_len = entry.kept.line_at, entry.kept.line_len
            entry.kept = KeptAt(line_at, line_len, *at)
        elif entry.answer is not None:
            entry.answer["turns"] = turns

    def readmit(self, admitted: dict[str, Any]) -> bool:
        """Queue again a rollout admitted before a crash that never finished (``--resume``),
        under its original lease hash and a fresh deadline. ``False`` when it finished (its
        result was restored) or the journal line is not an admission. A rollout admitted
        with a model key runs again without it (keys are never written down) and says so
        in its warnings."""
        rollout_id = admitted.get("rollout_id")
        digest = admitted.get("lease_sha256")
        if not isinstance(rollout_id, str) or not isinstance(digest, str):
            return False
        if rollout_id in self._entries or rollout_id in self._forgotten:
            return False  # finished: restored, or past retention with its id kept
        try:
            request = RolloutRequest.model_validate(admitted)
        except ValueError:
            return False
        now = self._clock()
        item = self._work_item(request)
        if admitted.get("had_key"):
            self.rerun_without_key.add(rollout_id)
        entry = Served(
            rollout_id,
            Lease(digest, self.settings.lease_sec, now),
            request.label,
            item,
            now,
            request=request_fields(request),
        )
        self._entries[rollout_id] = entry
        self._unrecorded[rollout_id] = entry
        self._names[safe_name(rollout_id)] = rollout_id
        self._queue.append(entry)
        self._queued += 1
        self._wake_one()
        if self.on_admitted is not None:
            self.on_admitted()
        return True

    def request_fields(self, rollout_id: str) -> dict[str, Any] | None:
        entry = self._entries.get(rollout_id)
        return None if entry is None else entry.request

    def gate_reason(self, rollout_id: str) -> str | None:
        """The reason a rollout cancelled before it started was given (taken once)."""
        return self.gate.take(rollout_id)

    # -- reads -------------------------------------------------------------------------

    def lease_digest(self, rollout_id: str) -> str | None:
        entry = self._entries.get(rollout_id)
        return None if entry is None else entry.lease.digest

    async def result(self, rollout_id: str, token: str) -> dict[str, Any]:
        """The rollout's answer: at once when finished, else after it changes or
        ``result_wait_sec``. Renews the lease of an unfinished rollout; a lapsed one ends
        it (``lease_expired``). Raises :class:`Refused` 404 (unknown) or 403 (wrong token)."""
        entry = self._authenticated(rollout_id, token)
        if entry.ended:
            return self._answer(entry)
        if not entry.lease.renew(self._clock()):
            self._expire(entry)
            return self._answer(entry)
        changed = entry.changed
        if changed is None:
            changed = entry.changed = asyncio.Event()
        try:
            await asyncio.wait_for(changed.wait(), self.settings.result_wait_sec)
        except TimeoutError:
            pass
        entry = self._authenticated(rollout_id, token)
        if entry.ended:
            return self._answer(entry)
        return progress_answer(rollout_id, entry.status)

    def _answer(self, entry: Served) -> dict[str, Any]:
        """``entry``'s terminal answer: the one held in memory, dropped as it is given when
        the results file holds it; else read back from there (the same body)."""
        answer = entry.answer
        if answer is not None:
            if entry.kept is not None:
                entry.answer = None
            return answer
        assert entry.kept is not None and self.lines is not None
        try:
            record, turns = self.lines.read_back(entry.kept)
            if not isinstance(record, dict) or record.get("rollout_id") != entry.rollout_id:
                raise ValueError("the line there is another rollout's")
            answer = wire_result(ExecutionResult.from_dict(record), entry.label)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise Refused(
                500, f"this rollout's result cannot be read again from the results file: {exc}"
            ) from None
        if self.settings.capture_tokens:
            answer["turns"] = turns if isinstance(turns, list) else []
        return answer

    async def results_batch(self, leases: dict[str, str]) -> dict[str, Any]:
        """Read many rollouts at once, each as :meth:`result` reads one (its lease renewed
        while unfinished, a lapsed one ended), answering as soon as one has its terminal
        answer, else after ``result_wait_sec``: ``{"finished": [<terminal answer>...],
        "pending": [<id>...], "refused": [{"rollout_id", "status": 403|404, "detail"}...]}``.
        """
        finished: list[dict[str, Any]] = []
        refused: list[dict[str, Any]] = []
        waiting: list[Served] = []
        now = self._clock()
        for rollout_id, token in leases.items():
            try:
                entry = self._authenticated(rollout_id, token)
            except Refused as exc:
                refused.append(
                    {"rollout_id": rollout_id, "status": exc.status, "detail": exc.detail}
                )
                continue
            if not entry.ended and not entry.lease.renew(now):
                self._expire(entry)
            if entry.ended:
                self._take_answer(entry, finished, refused)
            else:
                waiting.append(entry)
        if waiting and not finished:
            await self._any_finished(waiting)
        pending: list[str] = []
        for entry in waiting:
            if entry.ended:
                self._take_answer(entry, finished, refused)
            else:
                pending.append(entry.rollout_id)
        return {"finished": finished, "pending": pending, "refused": refused}

    def _take_answer(
        self, entry: Served, finished: list[dict[str, Any]], refused: list[dict[str, Any]]
    ) -> None:
        """Add an ended rollout's answer to ``finished``, or to ``refused`` the 500 of one
        its results line no longer holds."""
        try:
            finished.append(self._answer(entry))
        except Refused as exc:
            refused.append(
                {"rollout_id": entry.rollout_id, "status": exc.status, "detail": exc.detail}
            )

    async def _any_finished(self, entries: list[Served]) -> None:
        """Wait until one of ``entries`` has its terminal answer, or ``result_wait_sec``."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for entry in entries:
            self._watchers.setdefault(entry.rollout_id, []).append(woken)
        try:
            async with asyncio.timeout(self.settings.result_wait_sec):
                await woken
        except TimeoutError:
            pass
        finally:
            for entry in entries:
                watchers = self._watchers.get(entry.rollout_id)
                if watchers is not None:
                    with contextlib.suppress(ValueError):
                        watchers.remove(woken)
                    if not watchers:
                        del self._watchers[entry.rollout_id]

    def _authenticated(self, rollout_id: str, token: str) -> Served:
        entry = self._entries.get(rollout_id)
        if entry is None:
            raise Refused(404, "unknown rollout_id")
        if not lease_matches(entry.lease.digest, token):
            raise Refused(403, "invalid polling lease")
        return entry

    # -- cancellation and expiry -------------------------------------------------------

    def cancel(
        self, ids: list[str] | None = None, prefix: str | None = None, every: bool = False
    ) -> dict[str, str]:
        """Cancel the selected rollouts; each id's disposition: ``cancelled_queued``,
        ``cancelled_running`` or ``not_found`` (unknown or finished: idempotent)."""
        if every:
            selected: Iterable[str] = list(self._entries)
        elif prefix is not None:
            selected = [rid for rid in self._entries if rid.startswith(prefix)]
        else:
            selected = ids or []
        dispositions: dict[str, str] = {}
        for rollout_id in selected:
            entry = self._entries.get(rollout_id)
            if entry is None or entry.ended:
                dispositions[rollout_id] = "not_found"
            elif entry.in_queue:
                reply = cancelled_answer(rollout_id, CANCELLED_MESSAGE)
                self._cancel_queued(entry, CANCELLED_MESSAGE, reply)
                dispositions[rollout_id] = "cancelled_queued"
            else:
                queued = entry.status is RolloutStatus.QUEUED
                self._cancel_started(entry, CANCELLED_MESSAGE)
                dispositions[rollout_id] = "cancelled_queued" if queued else "cancelled_running"
        return dispositions

    def _cancel_queued(self, entry: Served, reason: str, reply: dict[str, Any]) -> None:
        """End a queued rollout now: its answer is ``reply``; the runner records it first."""
        entry.in_queue = False
        self._queued -= 1
        entry.answer = reply
        self.gate.hold(entry.rollout_id, reason)
        assert entry.item is not None  # queued: not recorded yet
        self._ahead.append(entry.item)
        self._set_status(entry, RolloutStatus.CANCELLED)
        self._wake_one()

    def _cancel_started(self, entry: Served, reason: str) -> None:
        """Cancel a rollout the runner took: in flight, or not yet started by the backend."""
        runner = self.runner
        if runner is None or not runner.cancel(entry.rollout_id, reason):
            self.gate.hold(entry.rollout_id, reason)  # taken, not yet started: never starts

    def _expire(self, entry: Served) -> None:
        """The lease lapsed: the rollout fails with ``lease_expired`` and is cancelled."""
        self.lease_expiries += 1
        reply = lease_expired_answer(entry.rollout_id)
        if entry.in_queue:
            self._cancel_queued(entry, LEASE_EXPIRED_MESSAGE, reply)
            entry.status = RolloutStatus.FAILURE
            return
        entry.answer = reply
        self._cancel_started(entry, LEASE_EXPIRED_MESSAGE)
        self._set_status(entry, RolloutStatus.FAILURE)

    def sweep(self) -> None:
        """Expire lapsed leases of unfinished rollouts; forget answers kept longer than
        ``retention_sec`` (their ids stay taken)."""
        now = self._clock()
        for entry in list(self._unrecorded.values()):
            if not entry.ended and entry.lease.lapsed(now):
                self._expire(entry)
        # recorded in order of finishing: the oldest first (a line restored out of order,
        # its clock edited, waits at most one retention behind the one before it)
        recorded = self._recorded
        retention = self.settings.retention_sec
        while recorded and now - (recorded[0].finished_at or now) >= retention:
            entry = recorded.popleft()
            if self._entries.get(entry.rollout_id) is entry:
                del self._entries[entry.rollout_id]
                self._forgotten.add(entry.rollout_id)

    async def sweep_forever(self, every_sec: float = 0.5) -> None:
        """:meth:`sweep` every ``every_sec`` seconds until cancelled."""
        while True:
            await asyncio.sleep(every_sec)
            self.sweep()

    # -- health ------------------------------------------------------------------------

    @property
    def queued(self) -> int:
        return self._queued

    def active(self) -> int:
        """Rollouts admitted and not finished."""
        return len(self._unrecorded)

    def health(self, backend_health: dict[str, Any]) -> dict[str, Any]:
        """``GET /health``: the backend's fields, the queue, and osmosis's identity and
        lifecycle fields."""
        payload = dict(backend_health)
        concurrency = dict(payload.get("concurrency") or {})
        concurrency.update({"queued": self._queued, "running": self.running})
        payload["concurrency"] = concurrency
        payload["max_queued"] = self.settings.max_queued
        payload["admitted"] = self.admitted
        payload["refused_queue_full"] = self.refused_full
        payload["lease_expiries"] = self.lease_expiries
        rate = self.drain.per_sec(self._clock())
        payload["drain_per_sec"] = None if rate is None else round(rate, 3)
        payload["instance_id"] = self.instance_id
        payload["process_id"] = self.process_id
        payload["lifecycle"] = {
            "accepting_rollouts": self.accepting,
            "active_rollouts": self.active(),
        }
        if self._refusal is not None:
            payload["refusing"] = self._refusal
        return payload
