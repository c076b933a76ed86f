"""Percentiles of a stream of non-negative numbers in bounded memory.

A summary reports percentiles of per-rollout durations and token counts; keeping every value
would make its memory grow with the run (8 bytes a rollout, and a list of floats four times
that to sort). :class:`QuantileSketch` keeps the values exactly up to :data:`EXACT_LIMIT`,
then counts them in logarithmic buckets, each :data:`BUCKET_RATIO` times wider than the last:
a percentile read from the buckets is within half a bucket (about 1 %) of the exact value,
and the maximum stays exact.
"""

from __future__ import annotations

import math
from array import array

from osmo_run.run.reporting.stats import percentile

EXACT_LIMIT = 4096
"""Values kept exactly before the sketch switches to buckets (32 KiB)."""
BUCKET_RATIO = 1.02
SMALLEST = 1e-6
"""Values below this (and zero) share the first bucket."""
BUCKETS = 1800
"""Buckets from SMALLEST to SMALLEST * BUCKET_RATIO**BUCKETS (about 3e9); larger values go
to the last bucket (the maximum is kept exactly)."""
_LOG_RATIO = math.log(BUCKET_RATIO)


class QuantileSketch:
    """Adds non-negative values one at a time; :meth:`quantile` reads a percentile back.

    Memory is at most ``EXACT_LIMIT`` floats, then ``BUCKETS`` counters, whatever the
    number of values.
    """

    def __init__(self) -> None:
        self._exact: array[float] | None = array("d")
        self._counts: array[int] | None = None
        self.count = 0
        self.max: float | None = None
        self.total = 0.0

    def add(self, value: float) -> None:
        """Count ``value`` (negative values count as 0)."""
        value = max(float(value), 0.0)
        self.count += 1
        self.total += value
        if self.max is None or value > self.max:
            self.max = value
        if self._exact is not None:
            self._exact.append(value)
            if len(self._exact) > EXACT_LIMIT:
                self._to_buckets()
            return
        assert self._counts is not None
        self._counts[_bucket(value)] += 1

    def _to_buckets(self) -> None:
        assert self._exact is not None
        self._counts = array("q", bytes(8 * BUCKETS))
        for value in self._exact:
            self._counts[_bucket(value)] += 1
        self._exact = None

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile (0..1): exact (linear interpolation) while the values are few,
        then the middle of the bucket holding it, never above the maximum; ``None`` when
        empty."""
        if self.count == 0:
            return None
        if self._exact is not None:
            return percentile(sorted(self._exact), q)
        assert self._counts is not None and self.max is not None
        rank = q * (self.count - 1)
        if rank >= self.count - 1:
            return self.max
        seen = 0
        for index, count in enumerate(self._counts):
            seen += count
            if seen > rank:
                return min(_middle(index), self.max)
        return self.max


def _bucket(value: float) -> int:
    if value < SMALLEST:
        return 0
    return min(int(math.log(value / SMALLEST) / _LOG_RATIO) + 1, BUCKETS - 1)


def _middle(index: int) -> float:
    if index == 0:
        return 0.0
    low = SMALLEST * BUCKET_RATIO ** (index - 1)
    return low * math.sqrt(BUCKET_RATIO)
