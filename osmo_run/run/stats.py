"""Statistics over rollout rewards: means with honest denominators, standard error,
confidence intervals and the unbiased pass@k estimator. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Z_95 = 1.959963984540054


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one row with ``n`` samples of which ``c`` passed (Chen et al.):
    ``1 - C(n - c, k) / C(n, k)``. Raises ``ValueError`` unless ``0 <= c <= n`` and
    ``1 <= k <= n``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    # The product form avoids huge binomials: prod_{i=n-c+1}^{n} (1 - k / i).
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_k_ks(samples_per_row: int) -> list[int]:
    """The k reported for ``samples_per_row``: 1, 2, 4, ... up to it."""
    ks = []
    k = 1
    while k <= samples_per_row:
        ks.append(k)
        k *= 2
    return ks


def mean_pass_at_k(rows: Iterable[tuple[int, int]], k: int) -> float | None:
    """pass@k averaged over rows given as ``(n, c)``; rows with fewer than k samples are
    left out (they cannot say anything about k); ``None`` without any row."""
    values = [pass_at_k(n, c, k) for n, c in rows if n >= k]
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class MeanEstimate:
    """A sample mean with its standard error and a normal 95% confidence interval."""

    n: int
    mean: float | None
    stderr: float | None
    ci_low: float | None
    ci_high: float | None

    def to_dict(self) -> dict[str, float | int | list[float | None] | None]:
        return {
            "n": self.n,
            "mean": self.mean,
            "stderr": self.stderr,
            "ci95": None if self.ci_low is None else [self.ci_low, self.ci_high],
        }


def estimate_mean(count: int, total: float, total_sq: float) -> MeanEstimate:
    """Mean, standard error (sample standard deviation / sqrt(n)) and 95% interval from a
    count, a sum and a sum of squares; stderr needs at least two values."""
    if count == 0:
        return MeanEstimate(0, None, None, None, None)
    mean = total / count
    if count < 2:
        return MeanEstimate(count, mean, None, None, None)
    variance = max(total_sq - count * mean * mean, 0.0) / (count - 1)
    stderr = math.sqrt(variance / count)
    return MeanEstimate(count, mean, stderr, mean - Z_95 * stderr, mean + Z_95 * stderr)


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated ``q``-quantile (0..1) of already sorted values; ``None`` if empty."""
    if not sorted_values:
        return None
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)
