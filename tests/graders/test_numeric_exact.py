"""NumericMatch against the answer forms of real MATH and GSM8K rows: mixed numbers,
MATH's ``10,\\!000`` thousands separator, powers, and exact comparison of integers and
decimals (no float rounding, no default tolerance between distinct integers)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osmo_run import RolloutStatus
from osmo_run.graders import NumericMatch
from tests.graders.conftest import explanation, grade

GSM8K_ANSWER = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)

FORMS: list[tuple[dict[str, Any], Any, str, float]] = [
    # MATH: mixed numbers are whole + fraction, never digits glued together
    ({}, 7, "\\boxed{2\\frac{1}{3}}", 0.0),
    ({}, "2\\frac{1}{3}", "\\boxed{\\frac{7}{3}}", 1.0),
    ({}, "\\frac{7}{3}", "so the answer is $2\\frac{1}{3}$", 1.0),
    ({}, 15.5, "\\boxed{3\\frac{1}{2}}", 0.0),
    ({}, "3\\frac{1}{2}", "\\boxed{3\\frac{1}{2}}", 1.0),
    ({}, 3.5, "\\boxed{3 \\dfrac{1}{2}}", 1.0),
    ({}, "-2\\frac{1}{3}", "\\boxed{-\\frac{7}{3}}", 1.0),
    ({}, "-\\frac{1}{2}", "\\boxed{-\\frac{1}{2}}", 1.0),
    ({}, 0.5, "\\boxed{\\frac12}", 1.0),
    # MATH: thousands written 10,\!000
    ({}, 0, "\\boxed{10,\\!000}", 0.0),
    ({}, 10000, "\\boxed{10,\\!000}", 1.0),
    ({}, "10,\\!000", "\\boxed{10,\\!000}", 1.0),
    ({}, "10,\\!000", "The total is 10000.", 1.0),
    ({}, "1,\\!000,\\!000", "\\boxed{1000000}", 1.0),
    ({}, "\\$1,\\!234.50", "\\boxed{\\$1,\\!234.50}", 1.0),
    ({"decimal_comma": True}, 10000, "\\boxed{10,\\!000}", 1.0),
    ({"decimal_comma": True}, "3,5", "\\boxed{3{,}5}", 1.0),
    ({}, "90^\\circ", "\\boxed{90^\\circ}", 1.0),
    # powers
    ({}, 3, "\\boxed{10^3}", 0.0),
    ({}, 1000, "\\boxed{10^3}", 1.0),
    ({}, 1024, "\\boxed{2^{10}}", 1.0),
    ({}, "10^{-2}", "0.01", 1.0),
    # distinct integers never match by default, however large
    ({}, 1000000000, "1000000001", 0.0),
    ({}, 12345678910, "12345678901", 0.0),
    ({}, "1000000000", "1,000,000,000", 1.0),
    ({}, "1e9", "1000000001", 0.0),
    ({"rel_tol": 0}, 9007199254740992, "9007199254740993", 0.0),
    ({"rel_tol": 0}, "9007199254740993", "9,007,199,254,740,993", 1.0),
    # decimals compare exactly
    ({}, "1000000000.5", "1000000001.5", 0.0),
    ({}, "0.1", "0.10", 1.0),
    ({}, 0.1, "0.1", 1.0),
    ({"rel_tol": 0}, 0.3, "0.3", 1.0),
    ({}, "1/3", "0.333333333333", 0.0),
    ({}, 0.1 + 0.2, "0.3", 1.0),  # a float label's noise is still forgiven
    # an explicit tolerance applies to integers too
    ({"rel_tol": 0.01}, 100, "101", 1.0),
    ({"abs_tol": 1}, 1000000000, "1000000001", 1.0),
    # GSM8K
    ({}, "72", GSM8K_ANSWER, 1.0),
    ({}, "1080", "The total cost is $1,080.", 1.0),
    ({}, 18, "Janet makes 9 * 2 = $18 every day. The answer is 18.", 1.0),
    ({}, "-4", "The temperature dropped to -4 degrees.", 1.0),
]


@pytest.mark.parametrize(("settings", "label", "answer", "reward"), FORMS)
def test_math_and_gsm8k_answer_forms(
    settings: dict[str, Any], label: Any, answer: str, reward: float
) -> None:
    result = grade(NumericMatch, label, answer, settings)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward, explanation(result)


def test_exact_comparison_is_explained() -> None:
    result = grade(NumericMatch, 1000000000, "1000000001")
    assert explanation(result) == (
        "last number of the answer, 1000000001, does not match label 1000000000 (exactly)"
    )
    assert result.info["grader"]["answer_number"] == 1000000001


def test_a_5000_digit_answer_is_reward_0_not_an_error() -> None:
    result = grade(NumericMatch, 5, "9" * 5000)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == 0.0


def test_a_huge_power_is_not_computed() -> None:
    result = grade(NumericMatch, 5, "\\boxed{10^{999999999}}")
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == 0.0


_FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_INTEGERS = st.integers(min_value=-(10**30), max_value=10**30)


@_FAST
@given(_INTEGERS, st.integers(min_value=-1000, max_value=1000))
def test_distinct_integers_never_match_by_default(a: int, delta: int) -> None:
    b = a + delta
    result = grade(NumericMatch, a, f"The answer is {b}.")
    assert result.reward == float(a == b), explanation(result)


@_FAST
@given(_INTEGERS)
def test_an_integer_matches_itself_with_thousands_separators(a: int) -> None:
    latex = f"{a:,}".replace(",", ",\\!")
    assert grade(NumericMatch, str(a), f"\\boxed{{{latex}}}").reward == 1.0
    assert grade(NumericMatch, f"{a:,}", f"The answer is {a}.").reward == 1.0


@_FAST
@given(
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=1, max_value=10**4),
    st.integers(min_value=2, max_value=10**4),
)
def test_a_mixed_number_is_its_whole_plus_its_fraction(
    whole: int, numerator: int, denominator: int
) -> None:
    mixed = f"{whole}\\frac{{{numerator}}}{{{denominator}}}"
    improper = f"{whole * denominator + numerator}/{denominator}"
    assert grade(NumericMatch, improper, f"\\boxed{{{mixed}}}").reward == 1.0
    assert grade(NumericMatch, mixed, f"\\boxed{{-{mixed}}}").reward == 0.0


_DECIMALS = st.decimals(min_value=-(10**12), max_value=10**12, places=6, allow_nan=False)


@_FAST
@given(_DECIMALS, st.integers(min_value=-2, max_value=2))
def test_distinct_decimals_never_match_by_default(a: Decimal, steps: int) -> None:
    b = a + steps * max(abs(a), Decimal(1)) / (2 * 10**9)  # within the old rel_tol 1e-9
    result = grade(NumericMatch, str(a), f"The answer is {b:f}.")
    assert result.reward == float(a == b), explanation(result)
