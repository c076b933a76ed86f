"""Admission: a bounded queue, and how long a refused trainer should wait.

``Retry-After`` is derived from the drain rate the server observes (rollouts finished per
second over the recent ones), never a constant: the time the queue needs to free the
places a new submission waits for.
"""

from __future__ import annotations

import math
from collections import deque

MIN_RETRY_AFTER_SEC = 1
MAX_RETRY_AFTER_SEC = 60
"""osmosis's client clamps ``Retry-After`` to 60 s; a longer answer would be cut anyway."""

RATE_WINDOW = 256
"""How many recent finishes the drain rate is measured over."""


class DrainRate:
    """Rollouts finished per second, over the last :data:`RATE_WINDOW` finishes and up to
    now (a stall lowers it: no finish is no drain)."""

    def __init__(self) -> None:
        self._finished: deque[float] = deque(maxlen=RATE_WINDOW)

    def observe(self, now: float) -> None:
        """Count one rollout finished at ``now`` (``time.monotonic()``)."""
        self._finished.append(now)

    def per_sec(self, now: float) -> float | None:
        """The drain rate at ``now``; ``None`` before two rollouts have finished."""
        if len(self._finished) < 2:
            return None
        span = now - self._finished[0]
        if span <= 0:
            return None
        return len(self._finished) / span


def retry_after_sec(
    drain: DrainRate, queued: int, max_queued: int, oldest_age_sec: float, now: float
) -> int:
    """Whole seconds a refused submission should wait: until the observed drain rate has
    freed the places beyond ``max_queued`` it waits behind (``queued - max_queued + 1``).
    Before any drain is observed, the age of the oldest unfinished rollout stands for how
    long one takes. Clamped to ``[1, 60]``."""
    excess = max(queued - max_queued + 1, 1)
    rate = drain.per_sec(now)
    seconds = excess / rate if rate else oldest_age_sec
    return max(MIN_RETRY_AFTER_SEC, min(MAX_RETRY_AFTER_SEC, math.ceil(seconds)))
