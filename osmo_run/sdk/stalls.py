"""Who blocked the shared event loop, and for how long.

Rows that run in one process share one event loop. Synchronous code in one row's coroutine
(``time.sleep``, a CPU-bound loop, a blocking client) stops every other row for as long as
it runs: their timers cannot fire and their awaits cannot resume. Without help the other
rows would overrun their deadlines and be blamed for it.

:class:`LoopStallMonitor` measures such stalls and names the rollout that caused each one:

* a *heartbeat* callback runs on the loop every :data:`STALL_CHECK_INTERVAL_SEC`; when it
  runs more than :data:`STALL_THRESHOLD_SEC` late, the loop was stalled for that long;
* a *watchdog* thread wakes every :data:`STALL_SAMPLE_SEC` and, as soon as the heartbeat is
  overdue at all, asks which task holds the loop (``asyncio.current_task(loop)``) and whose
  rollout that task belongs to (its context's rollout context, or :data:`rollout_owner` for
  a grader: context variables every task a rollout's code creates inherits). Looking from
  the moment the heartbeat is due, not from when it is :data:`STALL_THRESHOLD_SEC` late,
  gives the watchdog at least that long to see the holder of any stall that counts, so a
  stall just past the threshold has its owner too.

Who gets a stall's time: a rollout's own stalls count against it; a stall another rollout
caused, or code outside any row (the runner itself), is added to the deadlines of the rows
it held up. A stall the watchdog never saw (its thread starved for the whole stall) has no
known owner: it may be the very row asking, so it extends no deadline (an unowned stall
never rescues the row that caused it). Between two sightings the holder changed at an
unknown moment; when a row was seen after code outside any row, the time between goes to
the row, so a row is never excused for time that may have been its own.

Nothing runs per task step, so the hot path pays nothing; the heartbeat and the watchdog
cost a few microseconds every few tens of milliseconds. :meth:`LoopStallMonitor.during`
then tells a phase how much of its time other rollouts took (its deadline is extended by
that) and how much it took itself (which counts against it). Stdlib only.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

from osmo_run.sdk.context import _current
from osmo_run.sdk.deadlines import STALL_CHECK_INTERVAL_SEC, STALL_SAMPLE_SEC, STALL_THRESHOLD_SEC

rollout_owner: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "osmo_run_rollout_owner", default=None
)
"""The id of the rollout whose grader runs in this context (a workflow's context holds its
``RolloutContext``, which names the rollout already)."""

_OWNER_TASK_PREFIX = "osmo-run:"
"""Python 3.11 has no ``Task.get_context()``: the phase's own task carries its rollout in
its name there (tasks the rollout's code creates itself then go unattributed)."""

MAX_STALLS_KEPT = 4096
"""Stalls remembered for :meth:`LoopStallMonitor.during`; each lasted at least
``STALL_THRESHOLD_SEC``, so these span longer than any window asked about."""


def owner_task_name(rollout_id: str) -> str:
    """The name given to a phase's task on Python 3.11 (see ``_OWNER_TASK_PREFIX``)."""
    return _OWNER_TASK_PREFIX + rollout_id


def _owner_of(task: asyncio.Task[object] | None) -> str | None:
    if task is None:
        return None
    get_context = getattr(task, "get_context", None)
    if get_context is not None:
        context = get_context()
        owner: str | None = context.get(rollout_owner)
        if owner is None:  # a workflow's context holds its RolloutContext instead
            rollout = context.get(_current)
            owner = None if rollout is None else rollout.rollout_id
        return owner
    name = task.get_name()
    return name[len(_OWNER_TASK_PREFIX) :] if name.startswith(_OWNER_TASK_PREFIX) else None


@dataclass(frozen=True)
class Stall:
    """``owner``'s code held the loop from ``start`` to ``end`` (``time.monotonic()``);
    ``owner`` is ``None`` when no rollout's task was seen holding it. ``seen`` is false when
    the watchdog did not look at all while it lasted: then nobody knows who held the loop."""

    start: float
    end: float
    owner: str | None
    seen: bool = True


@dataclass(slots=True)
class _Sighting:
    """The watchdog saw ``owner`` (``None``: no rollout) hold the loop at every look from
    ``first`` to ``last`` during one stall."""

    first: float
    last: float
    owner: str | None


@dataclass(frozen=True)
class StallShare:
    """How a window of time was lost to stalls: ``own`` seconds to the rollout's own code,
    ``foreign`` seconds to everything else, and the rollouts that caused the foreign ones."""

    own: float = 0.0
    foreign: float = 0.0
    culprits: tuple[str, ...] = ()


class LoopStallMonitor:
    """Measures stalls of ``loop`` and who caused them; see the module docstring.

    Create and :meth:`start` it on the loop's thread; :meth:`close` stops it (the watchdog
    also stops by itself once the loop is closed). :meth:`add_beat_listener` lets other
    periodic work (a sweep of deadlines) ride on the heartbeat instead of timers of its own.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._due = time.monotonic() + STALL_CHECK_INTERVAL_SEC
        self._seen: list[_Sighting] = []
        """Who the watchdog saw holding the loop during the stall in progress, in order."""
        self._stalls: deque[Stall] = deque(maxlen=MAX_STALLS_KEPT)
        self._stop = threading.Event()
        self._handle: asyncio.TimerHandle | None = None
        self._listeners: list[Callable[[float], None]] = []
        self._thread = threading.Thread(target=self._watchdog, name="osmo-run-stalls", daemon=True)

    def start(self) -> None:
        self._due = time.monotonic() + STALL_CHECK_INTERVAL_SEC
        self._handle = self.loop.call_later(STALL_CHECK_INTERVAL_SEC, self._beat)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()

    def add_beat_listener(self, listener: Callable[[float], None]) -> None:
        """Call ``listener(now)`` on the loop's thread at every heartbeat (every
        :data:`STALL_CHECK_INTERVAL_SEC`, later while the loop is stalled), once the stall
        that delayed the beat, if any, is recorded: :meth:`during` then knows it. A listener
        must not block; one that raises is reported by the loop's exception handler and
        keeps being called."""
        self._listeners.append(listener)

    def _beat(self) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._due > STALL_THRESHOLD_SEC:
                self._stalls.extend(self._segments(self._last_beat, now))
            self._seen = []
            self._due = now + STALL_CHECK_INTERVAL_SEC
        self._handle = self.loop.call_later(STALL_CHECK_INTERVAL_SEC, self._beat)
        for listener in self._listeners:
            try:
                listener(now)
            except Exception as exc:  # one listener's bug stops neither the beat nor the rest
                self.loop.call_exception_handler(
                    {"message": "stall monitor beat listener failed", "exception": exc}
                )

    @property
    def _last_beat(self) -> float:
        """When the heartbeat last ran: the loop answered then, and a stall in progress
        began after it (counting from here errs by at most one interval, in favour of the
        rows that were kept waiting)."""
        return self._due - STALL_CHECK_INTERVAL_SEC

    def _segments(self, start: float, end: float) -> list[Stall]:
        """The stall from ``start`` to ``end`` split by who held the loop (see the module
        docstring): the first holder seen also gets the time before the watchdog first
        looked; a row seen after code outside any row gets the time since the sighting
        before; a stall nobody saw is one segment with ``seen`` false."""
        seen = self._seen
        if not seen:
            return [Stall(start, end, None, seen=False)]
        starts = [start]
        for before, after in pairwise(seen):
            # a row seen after no row may have held the loop since the last look at no row
            row_after_none = before.owner is None and after.owner is not None
            starts.append(before.last if row_after_none else after.first)
        ends = [*starts[1:], end]
        return [
            Stall(s, e, sighting.owner)
            for s, e, sighting in zip(starts, ends, seen, strict=True)
            if e > s
        ]

    def _watchdog(self) -> None:
        while not self._stop.wait(STALL_SAMPLE_SEC):
            if self.loop.is_closed():
                return
            if time.monotonic() <= self._due:
                continue
            try:
                owner = _owner_of(asyncio.current_task(self.loop))
            except RuntimeError:  # the loop is closing
                continue
            with self._lock:
                now = time.monotonic()
                if now <= self._due:
                    continue  # the heartbeat ran meanwhile: the loop answers again
                if self._seen and self._seen[-1].owner == owner:
                    self._seen[-1].last = now
                else:
                    self._seen.append(_Sighting(now, now, owner))

    def during(self, since: float, owner: str) -> StallShare:
        """How the time from ``since`` to now was lost to stalls (the stall in progress
        included), from the point of view of rollout ``owner``; a stall nobody saw counts
        neither way (see the module docstring)."""
        now = time.monotonic()
        with self._lock:
            stalls = [s for s in self._stalls if s.end > since]
            if now - self._due > STALL_THRESHOLD_SEC:
                stalls.extend(self._segments(self._last_beat, now))
        own = foreign = 0.0
        culprits: list[str] = []
        for stall in stalls:
            if not stall.seen:
                continue
            seconds = stall.end - max(stall.start, since)
            if stall.owner == owner:
                own += seconds
                continue
            foreign += seconds
            if stall.owner is not None and stall.owner not in culprits:
                culprits.append(stall.owner)
        return StallShare(own, foreign, tuple(culprits))
