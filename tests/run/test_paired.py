"""The paired tests behind ``osmo-run report A B`` and its regression gate: exact McNemar
against hand-computed binomial sums, the sign-flip test and the bootstrap interval on
small cases, and the gate's error rates by simulation."""

from __future__ import annotations

import math
import random

import pytest

from osmo_run.run.reporting.paired import (
    mcnemar_exact,
    paired_interval,
    pass_rate_test,
    regression_gate,
    sign_flip_test,
)


def test_exact_mcnemar_matches_hand_computed_binomial_sums() -> None:
    # 10 rows now failing, 2 now passing: P(X >= 10 | n=12, 1/2) = (66 + 12 + 1) / 4096
    two, worse = mcnemar_exact(10, 2)
    assert worse == pytest.approx(79 / 4096)
    assert two == pytest.approx(2 * 79 / 4096)
    # the other way round: B better, so "worse" is nearly 1: P(X >= 2 | 12) = 1 - 13/4096
    two, worse = mcnemar_exact(2, 10)
    assert worse == pytest.approx(1 - 13 / 4096) and two == pytest.approx(2 * 79 / 4096)
    # balanced: no evidence either way
    two, worse = mcnemar_exact(5, 5)
    assert two == 1.0 and worse == pytest.approx(638 / 1024)
    assert mcnemar_exact(0, 0) == (1.0, 1.0)
    # 6 of 6 discordant rows now failing: 1/64 one-sided, 1/32 two-sided
    assert mcnemar_exact(6, 0) == (pytest.approx(1 / 32), pytest.approx(1 / 64))


def test_exact_mcnemar_on_many_rows_agrees_with_the_normal_approximation() -> None:
    two, worse = mcnemar_exact(1100, 1000)  # the log-space sum (n > 1000)
    z = (1100 - 1050 - 0.5) / math.sqrt(2100 / 4)  # continuity-corrected
    assert worse == pytest.approx(0.5 * math.erfc(z / math.sqrt(2)), rel=0.02)
    assert two == pytest.approx(2 * worse, rel=0.02)


def test_sign_flip_test_enumerates_small_cases_exactly() -> None:
    # three rows each 0.5 worse: of the 8 sign patterns only all-negative is as low
    two, worse, method = sign_flip_test([-0.5, -0.5, -0.5, 0.0])
    assert worse == pytest.approx(1 / 8) and two == pytest.approx(2 / 8)
    assert "exact" in method and "3 rows" in method
    assert sign_flip_test([0.0, 0.0])[:2] == (1.0, 1.0)
    # with 0/1 rewards the sign-flip test is the exact McNemar test
    diffs = [-1.0] * 10 + [1.0] * 2
    assert sign_flip_test(diffs)[1] == pytest.approx(mcnemar_exact(10, 2)[1])


def test_bootstrap_interval_covers_the_mean_difference() -> None:
    rng = random.Random(1)
    diffs = [rng.gauss(-0.1, 0.3) for _ in range(400)]
    low, high, method = paired_interval(diffs)
    mean = sum(diffs) / len(diffs)
    assert low < mean < high and "bootstrap" in method
    assert high - low == pytest.approx(2 * 1.96 * 0.3 / math.sqrt(400), rel=0.2)


def _simulated_pair(rng: random.Random, rows: int, drop: float) -> list[tuple[bool, bool]]:
    """Run A and B over ``rows`` rows of one dataset. Rows are correlated, as real rows
    are (an easy row passes in both): each row passes in both runs with probability 0.65,
    fails in both with 0.25, and is discordant by chance with 0.10, either way alike (no
    difference: both runs pass 70 %). A real drop then fails, in B, ``drop`` of all rows
    among those passing in both."""
    pairs = []
    for _ in range(rows):
        u = rng.random()
        if u < 0.65:
            pair = (True, rng.random() >= drop / 0.65)
        elif u < 0.90:
            pair = (False, False)
        else:
            pair = (True, False) if rng.random() < 0.5 else (False, True)
        pairs.append(pair)
    return pairs


def _gate_fails(pairs: list[tuple[bool, bool]], alpha: float = 0.05) -> bool:
    return regression_gate(pass_rate_test(pairs, interval=False), alpha, 0.0).failed


def test_under_no_difference_the_gate_fails_at_most_alpha_of_the_time() -> None:
    rng = random.Random(7)
    failures = sum(_gate_fails(_simulated_pair(rng, 200, 0.0)) for _ in range(1000))
    # exact McNemar is conservative (measured: 35 of 1000); the bound leaves room for the
    # simulation's noise (the binomial sd of the count at 5 % of 1000 is about 7)
    assert failures <= 50 + 14, failures


def test_a_real_ten_point_drop_on_200_rows_fails_the_gate_nearly_always() -> None:
    """With 10 % of rows discordant by chance on top of the drop, exact McNemar at 0.05
    catches the drop about 94 % of the time (measured: 937 of 1000)."""
    rng = random.Random(8)
    failures = sum(_gate_fails(_simulated_pair(rng, 200, 0.10)) for _ in range(1000))
    assert failures >= 900, failures


def test_the_gate_says_why_it_passed_or_failed() -> None:
    worse = [(True, False)] * 12 + [(True, True)] * 80 + [(False, False)] * 8
    result = pass_rate_test(worse)
    verdict = regression_gate(result, 0.05, 0.02)
    assert verdict.failed
    assert verdict.line().startswith("regression gate failed: pass rate dropped by 0.120")
    assert "p = 0.000244 < --regression-alpha 0.05" in verdict.line()
    noise = [(True, False)] * 3 + [(False, True)] * 1 + [(True, True)] * 96
    verdict = regression_gate(pass_rate_test(noise), 0.05, 0.0)
    assert not verdict.failed
    assert "cannot tell that from noise (p = 0.312" in verdict.line()
    small = regression_gate(result, 0.05, 0.2)  # within the tolerance given
    assert not small.failed and "within --max-regression 0.2" in small.line()
