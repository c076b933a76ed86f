"""Statistics over rollout rewards: means with honest denominators, standard errors
(clustered by row when rows have several samples), confidence intervals that stay within
what was observed (Student-t, or Wilson for 0/1 values and pass rates) and the unbiased
pass@k estimator. Pure functions, standard library only (the t quantile is computed
exactly from the incomplete beta function)."""

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


T_METHOD = "student-t"
WILSON_METHOD = "wilson"
CLUSTERED = ", clustered by row"
"""Suffix of a method whose standard error treats each row's samples as one cluster."""


@dataclass(frozen=True)
class MeanEstimate:
    """A mean with its standard error and 95% confidence interval, and how the interval
    was made (``method``: :data:`T_METHOD` or :data:`WILSON_METHOD`, with
    :data:`CLUSTERED` when rows had several samples; ``clusters`` counts those rows).
    ``ci_low``/``ci_high`` are ``None`` when the data cannot give an interval (fewer than
    two values, or rewards all equal and not 0/1)."""

    n: int
    mean: float | None
    stderr: float | None
    ci_low: float | None
    ci_high: float | None
    method: str | None = None
    clusters: int | None = None

    def to_dict(self) -> dict[str, float | int | str | list[float | None] | None]:
        return {
            "n": self.n,
            "mean": self.mean,
            "stderr": self.stderr,
            "ci95": None if self.ci_low is None else [self.ci_low, self.ci_high],
            "ci_method": self.method,
            "clusters": self.clusters,
        }


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return result


def regularized_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p``-quantile of Student's t with ``df`` degrees of freedom (``0 < p < 1``,
    ``df > 0``), to double precision: the CDF inverted by bisection."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p} df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if middle in (low, high):
            break
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2.0


def wilson_interval(successes: float, n: float, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``successes / n`` (``n > 0``; ``n`` may be
    an effective sample size, not a whole number). Never leaves [0, 1] and never has zero
    width, even at 0 or n successes."""
    p = successes / n
    denominator = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denominator
    low = 0.0 if p <= 0.0 else max(centre - half, 0.0)
    high = 1.0 if p >= 1.0 else min(centre + half, 1.0)
    return low, high


def _clustered_variance(mean: float, n: int, clusters: Sequence[tuple[float, float]]) -> float:
    """Cluster-robust variance of a mean over ``n`` values in ``clusters`` given as
    ``(count, sum)``, with the small-sample factor C / (C - 1) ("Adding Error Bars to
    Evals", Miller 2024)."""
    spread = sum((total - count * mean) ** 2 for count, total in clusters)
    c = len(clusters)
    return c / (c - 1) * spread / (n * n)


def estimate_mean(
    count: int,
    total: float,
    total_sq: float,
    *,
    low: float | None = None,
    high: float | None = None,
    binary: bool = False,
    clusters: Sequence[tuple[float, float]] | None = None,
) -> MeanEstimate:
    """Mean, standard error and 95% interval of ``count`` values with sum ``total`` and sum
    of squares ``total_sq``.

    ``binary`` (every value 0 or 1): the Wilson score interval. Otherwise a Student-t
    interval with n - 1 degrees of freedom, clipped to the observed range [``low``,
    ``high``]. ``clusters`` (one ``(count, sum)`` per row, when rows have several
    samples): the standard error is clustered by row and t has C - 1 degrees of freedom;
    Wilson then uses the effective sample size p(1 - p) / SE² (the number of rows when
    p is 0 or 1).
    """
    if count == 0:
        return MeanEstimate(0, None, None, None, None)
    mean = total / count
    clustered = clusters is not None and len(clusters) >= 2
    suffix = CLUSTERED if clustered else ""
    c = len(clusters) if clustered and clusters is not None else None
    if clustered and clusters is not None:
        variance = _clustered_variance(mean, count, clusters)
        df = len(clusters) - 1
    elif count >= 2:
        variance = max(total_sq - count * mean * mean, 0.0) / (count - 1) / count
        df = count - 1
    else:
        variance, df = math.nan, 0
    if binary:
        spread = mean * (1.0 - mean)
        effective = float(count) if not clustered else (spread / variance if variance > 0 else c)
        effective = min(max(float(effective or 1.0), 1.0), float(count))
        ci_low, ci_high = wilson_interval(mean * effective, effective)
        stderr = math.sqrt(variance) if df else math.sqrt(spread / count)
        return MeanEstimate(count, mean, stderr, ci_low, ci_high, WILSON_METHOD + suffix, c)
    if not df:
        return MeanEstimate(count, mean, None, None, None, None, c)
    stderr = math.sqrt(variance)
    if stderr == 0.0:  # every value equal: no spread to build an interval from
        return MeanEstimate(count, mean, stderr, None, None, None, c)
    half = t_quantile(0.975, df) * stderr
    ci_low = mean - half if low is None else max(mean - half, low)
    ci_high = mean + half if high is None else min(mean + half, high)
    return MeanEstimate(count, mean, stderr, ci_low, ci_high, T_METHOD + suffix, c)


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated ``q``-quantile (0..1) of already sorted values; ``None`` if empty."""
    if not sorted_values:
        return None
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)
