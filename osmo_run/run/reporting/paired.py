"""Paired significance tests of run B against run A over the rows both ran, and the
regression gate built on them (``osmo-run report A B --fail-on-regression``).

Rows are the unit: a row's samples are clustered into one outcome per run (it passes when
at least half its samples pass; its reward is the mean over its samples, no reward = 0),
so runs with different ``--samples`` are compared fairly and a row with many samples
does not count as many independent observations.

* Pass/fail: the exact McNemar test, which uses only the discordant rows (``b`` passing in
  A and failing in B, ``c`` the other way): under no difference ``b ~ Binomial(b + c,
  1/2)``. Exact, so it holds at any number of rows.
* Mean reward: a paired sign-flip permutation test on the per-row differences (under no
  difference A and B are exchangeable within a row, so each difference is as likely
  negated): exact enumeration up to :data:`EXACT_FLIPS` non-zero differences, Monte Carlo
  with :data:`FLIPS` seeded flips up to :data:`MAX_MONTE_CARLO`, the normal approximation
  of that same sign-flip distribution beyond (a sum of over a thousand bounded terms).
* Confidence intervals of the difference: the paired bootstrap percentile interval over
  rows (:data:`RESAMPLES` seeded resamples) up to :data:`MAX_BOOTSTRAP` rows, the normal
  interval beyond.

Standard library only, on purpose: scipy would add a large compiled dependency for two
tests that are a few lines each; both are checked against hand-computed values and by
simulation in the tests. Seeds are fixed, so a report says the same thing every time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

EXACT_FLIPS = 12
FLIPS = 5000
MAX_MONTE_CARLO = 1000
RESAMPLES = 2000
MAX_BOOTSTRAP = 2000
_SEED = 20250
_Z95 = 1.959963984540054


def _binomial_upper_tail(n: int, k: int) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, 1/2)``."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if n <= 1000:  # exact integers
        return float(sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n)
    logs = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
        for i in range(k, n + 1)
    ]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))


def mcnemar_exact(now_failing: int, now_passing: int) -> tuple[float, float]:
    """The exact McNemar test of ``now_failing`` rows (pass in A, fail in B) against
    ``now_passing`` (fail in A, pass in B): ``(p two-sided, p one-sided that B is worse)``.
    With no discordant row both are 1."""
    n = now_failing + now_passing
    if n == 0:
        return 1.0, 1.0
    worse = _binomial_upper_tail(n, now_failing)
    low = min(now_failing, now_passing)
    two_sided = min(1.0, 2 * (1.0 - _binomial_upper_tail(n, low + 1)))
    return two_sided, worse


def sign_flip_test(differences: Sequence[float]) -> tuple[float, float, str]:
    """The paired sign-flip permutation test of ``differences`` (B - A per row):
    ``(p two-sided, p one-sided that B is worse, method)``."""
    nonzero = [d for d in differences if d != 0.0]
    m = len(nonzero)
    if m == 0:
        return 1.0, 1.0, "no row differs"
    observed = sum(nonzero)
    tolerance = 1e-9 * max(abs(d) for d in nonzero)
    if m <= EXACT_FLIPS:
        at_or_below = extreme = 0
        for mask in range(1 << m):
            total = sum(-d if mask >> i & 1 else d for i, d in enumerate(nonzero))
            at_or_below += total <= observed + tolerance
            extreme += abs(total) >= abs(observed) - tolerance
        count = 1 << m
        return extreme / count, at_or_below / count, f"exact sign-flip test over {m} rows"
    if m <= MAX_MONTE_CARLO:
        rng = random.Random(_SEED)
        at_or_below = extreme = 0
        for _ in range(FLIPS):
            bits = rng.getrandbits(m)
            total = sum(-d if bits >> i & 1 else d for i, d in enumerate(nonzero))
            at_or_below += total <= observed + tolerance
            extreme += abs(total) >= abs(observed) - tolerance
        # (count + 1) / (flips + 1): the observed arrangement is one of the flips
        return (
            (extreme + 1) / (FLIPS + 1),
            (at_or_below + 1) / (FLIPS + 1),
            f"sign-flip permutation test, {FLIPS:,} random flips",
        )
    spread = math.sqrt(sum(d * d for d in nonzero))
    z = observed / spread
    worse = 0.5 * math.erfc(-z / math.sqrt(2))
    two_sided = math.erfc(abs(z) / math.sqrt(2))
    return two_sided, worse, "sign-flip test, normal approximation"


def paired_interval(differences: Sequence[float]) -> tuple[float, float, str]:
    """The 95 % confidence interval of the mean of ``differences`` (rows resampled)."""
    n = len(differences)
    if n == 0:
        return math.nan, math.nan, "no rows"
    mean = sum(differences) / n
    if n <= MAX_BOOTSTRAP:
        rng = random.Random(_SEED)
        means = sorted(sum(rng.choices(differences, k=n)) / n for _ in range(RESAMPLES))
        low = means[int(0.025 * RESAMPLES)]
        high = means[min(RESAMPLES - 1, math.ceil(0.975 * RESAMPLES) - 1)]
        return low, high, f"paired bootstrap, {RESAMPLES:,} resamples of rows"
    variance = sum((d - mean) ** 2 for d in differences) / (n - 1)
    half = _Z95 * math.sqrt(variance / n)
    return mean - half, mean + half, "normal interval"


def shown(value: float, signed: bool = False) -> str:
    """``value`` to three decimals, or in three significant digits when it is large (a
    hand-edited reward of 1e308 must not print a 309-digit number)."""
    sign = "+" if signed else ""
    return f"{value:{sign}.3f}" if abs(value) < 1e6 or math.isnan(value) else f"{value:{sign}.3g}"


@dataclass(frozen=True)
class PairedResult:
    """One paired test of B against A: the means, their difference (B - A) with its 95 %
    interval, and the p-values."""

    metric: str
    """``pass rate`` or ``mean reward``."""
    rows: int
    mean_a: float
    mean_b: float
    ci_low: float
    ci_high: float
    p_two_sided: float
    p_worse: float
    """One-sided: the chance of a drop this large or larger if B were no worse."""
    method: str

    @property
    def difference(self) -> float:
        return self.mean_b - self.mean_a

    def line(self) -> str:
        """One line: the change, its interval and the test's p-values."""
        if self.rows == 0:
            return f"{self.metric}: no rows in both runs to compare"
        low, high = shown(self.ci_low, signed=True), shown(self.ci_high, signed=True)
        return (
            f"{self.metric} {shown(self.mean_a)} -> {shown(self.mean_b)} on {self.rows:,} rows "
            f"in both: {shown(self.difference, signed=True)} (95% CI {low} to {high}); "
            f"p = {self.p_two_sided:.3g} two-sided, "
            f"{self.p_worse:.3g} that B is worse ({self.method})"
        )


@dataclass(frozen=True)
class Significance:
    """Both paired tests of a comparison."""

    passing: PairedResult
    reward: PairedResult


def pass_rate_test(passed: Sequence[tuple[bool, bool]], interval: bool = True) -> PairedResult:
    """Exact McNemar over rows' (A, B) pass/fail; the interval only when ``interval`` (the
    gate's decision needs the p-value alone)."""
    n = len(passed)
    now_failing = sum(1 for a, b in passed if a and not b)
    now_passing = sum(1 for a, b in passed if b and not a)
    two, worse = mcnemar_exact(now_failing, now_passing)
    low, high, how = (
        paired_interval([float(b) - float(a) for a, b in passed])
        if interval
        else (math.nan, math.nan, "not computed")
    )
    return PairedResult(
        "pass rate",
        n,
        sum(a for a, _ in passed) / n if n else math.nan,
        sum(b for _, b in passed) / n if n else math.nan,
        low,
        high,
        two,
        worse,
        f"exact McNemar: {now_failing} rows now failing, {now_passing} now passing; CI by {how}",
    )


def mean_reward_test(rewards: Sequence[tuple[float, float]], interval: bool = True) -> PairedResult:
    """The sign-flip test over rows' (A, B) mean rewards (no reward = 0)."""
    n = len(rewards)
    differences = [b - a for a, b in rewards]
    two, worse, how = sign_flip_test(differences)
    low, high, ci = (
        paired_interval(differences) if interval else (math.nan, math.nan, "not computed")
    )
    return PairedResult(
        "mean reward",
        n,
        sum(a for a, _ in rewards) / n if n else math.nan,
        sum(b for _, b in rewards) / n if n else math.nan,
        low,
        high,
        two,
        worse,
        f"{how}; CI by {ci}",
    )


def paired_tests(
    passed: Sequence[tuple[bool, bool]], rewards: Sequence[tuple[float, float]]
) -> Significance:
    """Both tests over the rows both runs ran: ``passed`` holds each row's (A, B)
    pass/fail, ``rewards`` its (A, B) mean reward."""
    return Significance(pass_rate_test(passed), mean_reward_test(rewards))


@dataclass(frozen=True)
class RegressionVerdict:
    """The regression gate's decision on one comparison."""

    failed: bool
    result: PairedResult
    alpha: float
    max_regression: float
    missing: int = 0
    """Rows of the baseline A that B lacks (not run, or lines that are not records)."""

    def line(self) -> str:
        """What a CI log says: the verdict and why, the test named."""
        r = self.result
        drop = -r.difference
        if self.missing:
            return (
                f"regression gate failed: B lacks {self.missing:,} of baseline A's "
                f"{self.missing + r.rows:,} rows (not run, or lines that are not records), and "
                "the gate judges B on every row of A: run them in B, or compare runs of the "
                "same rows"
            )
        if r.rows == 0:
            return "regression gate failed: no rows in both runs to compare"
        if self.failed:
            return (
                f"regression gate failed: {r.metric} dropped by {shown(drop)} "
                f"(more than --max-regression {self.max_regression:g}), and the paired test "
                f"tells it from noise: p = {r.p_worse:.3g} < --regression-alpha {self.alpha:g}"
            )
        if drop <= self.max_regression:
            return (
                f"regression gate passed: {r.metric} changed by "
                f"{shown(r.difference, signed=True)}, within --max-regression "
                f"{self.max_regression:g}"
            )
        return (
            f"regression gate passed: {r.metric} dropped by {shown(drop)}, but the paired test "
            f"cannot tell that from noise (p = {r.p_worse:.3g} >= --regression-alpha "
            f"{self.alpha:g})"
        )


def regression_gate(
    result: PairedResult, alpha: float, max_regression: float, missing: int = 0
) -> RegressionVerdict:
    """Fail when B's metric in ``result`` dropped by more than ``max_regression`` and the
    one-sided test puts that drop below ``alpha``. Under no real difference it fails at
    most ``alpha`` of the time; a drop the test cannot tell from noise passes, and the
    verdict's line says so. It also fails when B lacks ``missing`` rows of the baseline
    (a partial or damaged B is no evidence of no regression) or no row is in both."""
    failed = (
        missing > 0
        or result.rows == 0
        or (-result.difference > max_regression and result.p_worse < alpha)
    )
    return RegressionVerdict(failed, result, alpha, max_regression, missing)
