"""Statistics over finished rows, accumulated as rows finish.

Failures are never dropped from a denominator silently: the summary reports the mean
reward over graded rows *and* the mean with every other row counted as 0.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from osmo_run.sdk.types import ExecutionResult, RolloutStatus


def percentile(sorted_values: array[float] | list[float], q: float) -> float | None:
    """Linear-interpolated ``q``-quantile (0..1) of already sorted values; ``None`` if empty."""
    if not sorted_values:
        return None
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


@dataclass
class RunSummary:
    """What the end of a run reports; ``to_dict`` is the saved ``summary.json``."""

    total: int
    by_status: dict[str, int]
    error_categories: dict[str, int]
    graded: int
    reward_sum: float
    reward_min: float | None
    reward_max: float | None
    duration_p50: float | None
    duration_p95: float | None
    duration_max: float | None
    grader_skipped: dict[str, int] = field(default_factory=dict)
    output: str | None = None
    interrupted: bool = False

    @property
    def mean_reward_graded(self) -> float | None:
        """Mean over rows that got a reward."""
        return self.reward_sum / self.graded if self.graded else None

    @property
    def mean_reward_all(self) -> float | None:
        """Mean over every row, rows without a reward counted as 0."""
        return self.reward_sum / self.total if self.total else None

    @property
    def failed(self) -> int:
        return self.by_status.get("failure", 0) + self.by_status.get("cancelled", 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "total": self.total,
            "by_status": self.by_status,
            "error_categories": self.error_categories,
            "grader_skipped": self.grader_skipped,
            "graded": self.graded,
            "reward": {
                "mean_graded": self.mean_reward_graded,
                "mean_all": self.mean_reward_all,
                "min": self.reward_min,
                "max": self.reward_max,
            },
            "duration_sec": {
                "p50": self.duration_p50,
                "p95": self.duration_p95,
                "max": self.duration_max,
            },
            "output": self.output,
            "interrupted": self.interrupted,
        }


class SummaryBuilder:
    """Accumulates finished results; memory per row is one float (the row's duration)."""

    def __init__(self) -> None:
        self._status: Counter[str] = Counter()
        self._categories: Counter[str] = Counter()
        self._skipped: Counter[str] = Counter()
        self._durations: array[float] = array("d")
        self._graded = 0
        self._reward_sum = 0.0
        self._reward_min: float | None = None
        self._reward_max: float | None = None

    @property
    def finished(self) -> int:
        return len(self._durations)

    @property
    def failed(self) -> int:
        return self._status[RolloutStatus.FAILURE.value] + self._status["cancelled"]

    def add(self, result: ExecutionResult) -> None:
        self._status[result.status.value] += 1
        if result.error_category is not None:
            self._categories[result.error_category.value] += 1
        if result.grader_skipped is not None:
            self._skipped[result.grader_skipped] += 1
        self._durations.append(result.timings.total_sec)
        reward = result.reward
        if reward is not None and result.status is RolloutStatus.SUCCESS:
            self._graded += 1
            self._reward_sum += reward
            if self._reward_min is None or reward < self._reward_min:
                self._reward_min = reward
            if self._reward_max is None or reward > self._reward_max:
                self._reward_max = reward

    def build(self, output: str | None = None, interrupted: bool = False) -> RunSummary:
        durations = sorted(self._durations)
        return RunSummary(
            total=len(durations),
            by_status=dict(self._status.most_common()),
            error_categories=dict(self._categories.most_common()),
            graded=self._graded,
            reward_sum=self._reward_sum,
            reward_min=self._reward_min,
            reward_max=self._reward_max,
            duration_p50=percentile(durations, 0.5),
            duration_p95=percentile(durations, 0.95),
            duration_max=durations[-1] if durations else None,
            grader_skipped=dict(self._skipped.most_common()),
            output=output,
            interrupted=interrupted,
        )
