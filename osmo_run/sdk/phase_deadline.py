"""The deadline of one phase of one rollout: time left, whether it was overrun, and the
sentences that say so.

A phase's time counts from ``started``. Time the event loop spent stalled by *other*
rollouts' synchronous code (known from a :class:`~osmo_run.sdk.stalls.LoopStallMonitor`,
when the phase runs on a loop shared with other rows) does not count against it; its own
stalls do. Stdlib only.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from osmo_run.sdk.deadlines import CANCEL_GRACE_SEC, STALL_THRESHOLD_SEC
from osmo_run.sdk.stalls import LoopStallMonitor, StallShare

ISOLATION_CURE = (
    "make it async (asyncio.to_thread for blocking calls), or run with --isolation process "
    "(spec isolation: process): each row then runs in its own process, killed at its deadline"
)
"""What to do about a row whose synchronous code blocks the loop every row shares."""

THREAD_CURE = "use asyncio, or run blocking work in a thread (asyncio.to_thread)"
"""The same for a phase that has a loop (a process) of its own."""


@dataclass(slots=True)
class PhaseDeadline:
    """``what`` (``workflow`` or ``grader``) of rollout ``owner`` must end within
    ``timeout_sec`` (``field_name`` in the request) of ``started``; ``None``: no deadline."""

    what: str
    field_name: str
    timeout_sec: float | None
    started: float
    owner: str
    stalls: LoopStallMonitor | None = None
    _share: StallShare | None = field(default=None, repr=False)

    def share(self) -> StallShare:
        """How the phase's time so far was lost to stalls (nothing without a monitor)."""
        if self.stalls is None:
            return StallShare()
        self._share = self.stalls.during(self.started, self.owner)
        return self._share

    def remaining(self) -> float:
        """Seconds left (may be negative); requires a deadline. Consults the stall monitor
        only once the wall clock says the time is up."""
        assert self.timeout_sec is not None
        left = self.timeout_sec - (time.monotonic() - self.started)
        if left <= 0 and self.stalls is not None:
            left += self.share().foreign
        return left

    def overrun(self) -> bool:
        """The phase, now finished, ran past its deadline once others' stalls are taken out."""
        return self.timeout_sec is not None and self.remaining() < 0

    def _own_stall(self) -> str:
        own = self._share.own if self._share is not None else 0.0
        if own < STALL_THRESHOLD_SEC:
            return ""
        return f"; its synchronous code blocked the event loop for {own:.2f}s: {ISOLATION_CURE}"

    def passed_message(self) -> str:
        return (
            f"{self.what} did not run: its deadline ({self.field_name} = "
            f"{self.timeout_sec:g}s) had passed before it started"
        )

    def expired_message(self, abandoned: bool) -> str:
        """The phase was cancelled at its deadline (and abandoned after the grace)."""
        text = f"{self.what} exceeded its {self.timeout_sec:g}s deadline ({self.field_name})"
        if abandoned:
            text += f" and ignored cancellation; abandoned after {CANCEL_GRACE_SEC:g}s"
        return text + self._own_stall()

    def late_message(self) -> str:
        """The phase returned, but after its deadline (it blocked the loop past it)."""
        elapsed = time.monotonic() - self.started
        if self._share is not None:
            elapsed -= self._share.foreign
        text = (
            f"{self.what} returned after its {self.timeout_sec:g}s deadline "
            f"({self.field_name}) in {elapsed:.2f}s"
        )
        own_stall = self._own_stall()
        if own_stall:
            return text + own_stall
        return text + f"; synchronous code blocked the event loop ({THREAD_CURE})"

    def extension_warning(self) -> str | None:
        """A sentence for a phase that finished in time only because others' stalls were
        taken out of its time; ``None`` otherwise."""
        share = self._share
        if self.timeout_sec is None or share is None or not share.foreign:
            return None
        elapsed = time.monotonic() - self.started
        if elapsed <= self.timeout_sec:
            return None
        culprits = ", ".join(repr(c) for c in share.culprits[:5]) or "code outside any row"
        return (
            f"{self.what} took {elapsed:.2f}s, past its {self.timeout_sec:g}s deadline "
            f"({self.field_name}), while the event loop was blocked for {share.foreign:.2f}s by "
            f"{culprits}; that time was added to its deadline"
        )


@dataclass(slots=True)
class PhaseClock:
    """A phase's deadline, unbuilt: most phases end at once and never need a
    :class:`PhaseDeadline` (building one costs more than the rest of a no-op phase's
    bookkeeping). Fields as for :class:`PhaseDeadline`."""

    what: str
    field_name: str
    timeout_sec: float | None
    started: float
    owner: str
    stalls: LoopStallMonitor | None = None

    def deadline(self) -> PhaseDeadline:
        return PhaseDeadline(
            self.what, self.field_name, self.timeout_sec, self.started, self.owner, self.stalls
        )

    def past_wall_clock(self) -> PhaseDeadline | None:
        """The deadline when the wall clock says the phase ran past it (others' stalls may
        still excuse it: ask :meth:`PhaseDeadline.overrun`); ``None`` when it is in time."""
        timeout = self.timeout_sec
        if timeout is not None and time.monotonic() - self.started > timeout:
            return self.deadline()
        return None


class PhaseAbandoned(BaseException):
    """Raised in a task whose phase ignored cancellation past :data:`CANCEL_GRACE_SEC` and
    was abandoned: the phase's timeout was handed on when it was abandoned, so the task has
    nothing left to report and ends. A ``BaseException``: ``except Exception`` in the
    rollout's own code must not turn it into a result."""


@dataclass(slots=True, eq=False)
class PhaseWatch:
    """One phase running in ``task`` under ``deadline`` (see :class:`DeadlineSweeper`)."""

    task: asyncio.Task[Any]
    clock: PhaseClock
    due: float
    on_abandon: Callable[[PhaseDeadline], None]
    deadline: PhaseDeadline | None = None
    """Built once the wall clock passes ``due`` (most phases end before)."""
    done: bool = False
    """Set by the phase when it ends, however it ends."""
    cancelled_at: float | None = None
    """When the sweep cancelled the task at the deadline."""
    abandoned: bool = False
    """The task ignored that cancellation past the grace; ``on_abandon`` was called."""


class DeadlineSweeper:
    """Keeps the deadlines of the phases running on one event loop, with one timer for all.

    Rows of a phase share one timeout, so phases watched in the order they start are in the
    order their deadlines fall: one first-in-first-out queue per timeout, and a single
    timer set for the earliest deadline of any queue. When it fires, the sweep walks each
    queue's front, whose wall-clock deadline has passed, drops the phases that ended, asks
    each one still running whether others' stalls extend its deadline
    (:meth:`PhaseDeadline.remaining`), and cancels the task of each whose deadline has
    passed. A task still in its phase :data:`CANCEL_GRACE_SEC` later (code that swallows
    cancellation or blocks) is abandoned: its ``on_abandon(deadline)`` is called (soon, on
    the loop), so its owner can move on. A phase costs an append and a flag; no timer and
    no task of its own. Use :meth:`of` for the running loop's sweeper.
    """

    _by_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, DeadlineSweeper]] = (
        weakref.WeakKeyDictionary()
    )
    """For loops that take no attributes; the others hold their sweeper themselves, so a
    closed loop and the tasks its sweeper still watches are garbage together."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queues: dict[float, deque[PhaseWatch]] = {}
        self._cancelled: deque[PhaseWatch] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> DeadlineSweeper:
        """The sweeper of ``loop`` (made on first use)."""
        sweeper: DeadlineSweeper | None = getattr(loop, "_osmo_run_deadlines", None)
        if sweeper is not None:
            return sweeper
        sweeper = cls._by_loop.get(loop)
        if sweeper is None:
            sweeper = cls(loop)
            try:
                loop._osmo_run_deadlines = sweeper  # type: ignore[attr-defined]
            except AttributeError:  # a loop with slots (uvloop)
                cls._by_loop[loop] = sweeper
        return sweeper

    def watch(
        self,
        task: asyncio.Task[Any],
        clock: PhaseClock,
        on_abandon: Callable[[PhaseDeadline], None],
    ) -> PhaseWatch:
        """Watch ``task``'s phase until its ``done`` is set; ``clock`` must have a
        timeout."""
        timeout = clock.timeout_sec
        assert timeout is not None
        watch = PhaseWatch(task, clock, clock.started + timeout, on_abandon)
        queue = self._queues.get(timeout)
        if queue is None:
            queue = self._queues[timeout] = deque()
        while queue and queue[0].done:  # phases end about in the order they start
            queue.popleft()
        queue.append(watch)
        if watch.due < self._timer_at:
            self._set_timer(watch.due)
        return watch

    def _set_timer(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._sweep)  # loop.time() is time.monotonic()

    def _sweep(self) -> None:
        self._timer, self._timer_at = None, math.inf
        now = time.monotonic()
        next_at = math.inf
        for timeout, queue in list(self._queues.items()):
            while queue and (queue[0].done or queue[0].cancelled_at is not None):
                queue.popleft()
            if not queue:
                del self._queues[timeout]
                continue
            for watch in queue:  # the front whose wall-clock deadline has passed
                if watch.due > now:
                    next_at = min(next_at, watch.due)
                    break
                if watch.done or watch.cancelled_at is not None:
                    continue
                if watch.deadline is None:
                    watch.deadline = watch.clock.deadline()
                left = watch.deadline.remaining()  # others' stalls may extend it
                if left > 0:
                    next_at = min(next_at, now + left)
                    continue
                watch.cancelled_at = now
                watch.task.cancel()
                self._cancelled.append(watch)
        cancelled = self._cancelled
        while cancelled:
            watch = cancelled[0]
            grace_ends = (watch.cancelled_at or now) + CANCEL_GRACE_SEC
            if not watch.done and grace_ends > now:
                next_at = min(next_at, grace_ends)
                break
            cancelled.popleft()
            if not watch.done:
                watch.abandoned = True
                self._loop.call_soon(watch.on_abandon, watch.deadline or watch.clock.deadline())
        if next_at < self._timer_at:  # a phase watched meanwhile may have set it earlier
            self._set_timer(next_at)
