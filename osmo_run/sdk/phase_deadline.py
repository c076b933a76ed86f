"""The deadline of one phase of one rollout: time left, whether it was overrun, and the
sentences that say so.

A phase's time counts from ``started``. Time the event loop spent stalled by *other*
rollouts' synchronous code (known from a :class:`~osmo_run.sdk.stalls.LoopStallMonitor`,
when the phase runs on a loop shared with other rows) does not count against it; its own
stalls do. Stdlib only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

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
