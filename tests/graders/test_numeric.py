"""Reading numbers as models write them, and NumericMatch's tolerance, extraction and
labels: thousands separators, negative zero, ``1e3``, the Unicode minus, percentages,
fractions, LaTeX and other scripts' digits."""

from __future__ import annotations

from typing import Any

import pytest

from osmo_run import ErrorCategory, Phase, RolloutStatus
from osmo_run.graders import NumericMatch
from osmo_run.graders.numeric import find_numbers, parse_number
from osmo_run.graders.settings import SettingsError
from tests.graders.conftest import explanation, grade

READ: list[tuple[str, list[float]]] = [
    ("The answer is 12.", [12.0]),  # a full stop is not a decimal
    ("1,234,567.89", [1234567.89]),
    ("1,23", [1.0, 23.0]),  # not a thousands group
    ("3,4,5", [3.0, 4.0, 5.0]),
    ("1\u00a0234 and 5\u202f678\u202f901", [1234.0, 5678901.0]),  # no-break, narrow spaces
    ("1\u2009234\u202f567", [1234.0, 567.0]),  # one separator per number
    ("1_000_000", [1_000_000.0]),
    ("5'000", [5000.0]),
    ("1{,}234", [1234.0]),  # LaTeX
    ("1\\,234", [1234.0]),
    ("\u22123", [-3.0]),  # the Unicode minus sign
    ("\uff0d3", [-3.0]),  # full-width hyphen-minus
    ("-0", [-0.0]),
    ("-0.0", [-0.0]),
    ("+7", [7.0]),
    (".5 and 5.", [0.5, 5.0]),
    ("1e3", [1000.0]),
    ("2.5E-4", [0.00025]),
    ("1.5 × 10^3", [1500.0]),
    ("1.5 \\times 10^{-2}", [0.015]),
    ("6.02*10**23", [6.02e23]),
    ("3/4", [0.75]),
    ("-3/4", [-0.75]),
    ("\\frac{3}{4}", [0.75]),
    ("\\dfrac{-1}{8}", [-0.125]),
    ("\\frac12", [0.5]),
    ("7/0", []),  # no number at all, not infinity
    ("10-20", [10.0, 20.0]),  # a hyphen between numbers is not a minus sign
    ("pages 10–20", [10.0, 20.0]),
    ("x-3 and x = -3", [3.0, -3.0]),
    ("H2O, x2 and the 3rd", [3.0]),  # digits inside words are not numbers
    ("v1.2.3", []),
    ("\u0661\u0662\u0663", [123.0]),  # Arabic-Indic digits
    ("\uff13\uff0e\uff15", [3.5]),  # full-width digits and point
    ("$1,234.50", [1234.5]),
    ("1e9999", []),  # beyond MAX_EXPONENT: not read
]


@pytest.mark.parametrize(("text", "values"), READ)
def test_find_numbers(text: str, values: list[float]) -> None:
    found = [float(n.value) for n in find_numbers(text)]  # exact values, nearest floats
    assert found == values


@pytest.mark.parametrize(
    ("text", "value", "percent"),
    [("50%", 50.0, True), ("50\\%", 50.0, True), ("50 percent", 50.0, True), ("٪50", 50.0, False)],
)
def test_percentages_are_marked(text: str, value: float, percent: bool) -> None:
    (number,) = [n for n in find_numbers(text) if n.value == value]
    assert number.percent is percent


def test_decimal_comma_swaps_the_separators() -> None:
    found = find_numbers("1.234,5 und 0,25", decimal_comma=True)
    assert [float(n.value) for n in found] == [1234.5, 0.25]
    assert [float(n.value) for n in find_numbers("1.234,5")] == [1.234, 5.0]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1,234", 1234.0),
        (" 42 ", 42.0),
        ("-0", -0.0),
        ("$5", 5.0),
        ("-$5", -5.0),
        ("3/4", 0.75),
        ("1e3", 1000.0),
    ],
)
def test_parse_number_reads_one_number(text: str, value: float) -> None:
    number = parse_number(text)
    assert number is not None and float(number.value) == value


@pytest.mark.parametrize("text", ["two", "", "12 apples", "1 2", "--3"])
def test_parse_number_refuses_anything_else(text: str) -> None:
    assert parse_number(text) is None


MATCH: list[tuple[dict[str, Any], Any, str, float]] = [
    ({}, "1,234", "The total is 1234.", 1.0),
    ({}, 1234, "The total is 1,234.", 1.0),
    ({}, "-0", "0", 1.0),  # negative zero equals zero
    ({}, 0, "The answer is -0.0", 1.0),
    ({}, 1000, "about 1e3 apples", 1.0),
    ({}, "1e3", "1,000", 1.0),
    ({}, -3, "x = \u22123", 1.0),
    ({}, "−3", "-3", 1.0),  # a Unicode minus in the label
    ({}, 0.5, "50%", 1.0),  # either reading of a percentage
    ({}, 50, "50%", 1.0),
    ({"percent": "value"}, 0.5, "50%", 0.0),
    ({"percent": "fraction"}, 50, "50%", 0.0),
    ({}, "50%", "0.5", 1.0),  # a percentage label
    ({}, 0.75, "\\boxed{\\frac{3}{4}}", 1.0),
    ({}, 12, "First 10, then 11, so \\boxed{12}. Check: 13", 1.0),  # the boxed answer wins
    ({"prefer_boxed": False}, 12, "so \\boxed{12}. Check: 13", 0.0),
    ({}, 7, "3 + 4 = 7", 1.0),  # the last number
    ({"occurrence": "first"}, 3, "3 + 4 = 7", 1.0),
    ({"pattern": r"ANSWER:\s*(.+)"}, 42, "I tried 41. ANSWER: 42 (I think 43)", 0.0),  # 43 last
    ({"pattern": r"ANSWER:\s*(\S+)"}, 42, "I tried 41. ANSWER: 42 (I think 43)", 1.0),
    ({"pattern": r"ANSWER:\s*(\S+)"}, 42, "I tried 41 and 42.", 0.0),  # no match: 0
    ({}, 0.1 + 0.2, "0.3", 1.0),  # float noise is within the default rel_tol
    ({}, 100, "100.5", 0.0),
    ({"abs_tol": 0.5}, 100, "100.5", 1.0),
    ({"rel_tol": 0.01}, 100, "100.9", 1.0),
    ({"rel_tol": 0.01}, 100, "101.1", 0.0),
    ({}, [3, 4], "it is 4", 1.0),  # any of several labels
    ({}, 5, "no digits here", 0.0),
    ({"decimal_comma": True}, "1.234,5", "Summe: 1.234,5 EUR", 1.0),
    ({}, 123, "\u0661\u0662\u0663", 1.0),
]


@pytest.mark.parametrize(("settings", "label", "answer", "reward"), MATCH)
def test_numeric_match(settings: dict[str, Any], label: Any, answer: str, reward: float) -> None:
    result = grade(NumericMatch, label, answer, settings)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward, explanation(result)


def test_numeric_match_explains_both_numbers_and_the_tolerance() -> None:
    result = grade(NumericMatch, "152", "The answer is 151.")
    assert explanation(result) == (
        "last number of the answer, 151, does not match label 152 (exactly)"
    )
    assert result.info["grader"]["answer_number"] == 151.0
    read = grade(NumericMatch, "1,000", "roughly 1e3")
    assert explanation(read) == (
        "last number of the answer, 1e3 = 1000, matches label 1,000 = 1000 (exactly)"
    )
    boxed = grade(NumericMatch, 0.5, "so \\boxed{\\frac{1}{2}}", {"rel_tol": 0.01})
    assert explanation(boxed).startswith("last number of \\boxed{}, 1/2 = 0.5, matches label 0.5")
    missing = grade(NumericMatch, 5, "none")
    assert explanation(missing) == "no number in the answer ('none'); label 5"


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("two", "NumericMatch: the label 'two' is not a number"),
        ("12 apples", "NumericMatch: the label '12 apples' is not a number"),
        (True, "NumericMatch: the label must be a number or a string holding one, got bool True"),
        ({"n": 1}, "NumericMatch: the label must be a number or a string holding one, got dict"),
        (float("nan"), "NumericMatch: the label must be a finite number, got float nan"),
    ],
)
def test_a_label_that_is_not_a_number_is_a_grader_validation_error(
    label: Any, message: str
) -> None:
    result = grade(NumericMatch, label, "2")
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.VALIDATION_ERROR
    assert result.error_phase is Phase.GRADER
    assert result.error_message is not None and message in result.error_message


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"abs_tol": -1}, "settings.abs_tol: must be at least 0, got -1.0"),
        ({"rel_tol": "1%"}, "settings.rel_tol: must be a number, got str '1%'"),
        ({"rel_tol": "nan"}, "settings.rel_tol: must be a finite number, got nan"),
        ({"rel_tol": True}, "settings.rel_tol: must be a number, got bool True"),
        ({"tolerance": 0.1}, "settings.tolerance: unknown setting; known: rel_tol, abs_tol"),
        ({"pattern": "ANSWER: (\\d+"}, "settings.pattern: does not compile: missing )"),
        ({"percent": "ratio"}, "settings.percent: must be one of 'either', 'value', 'fraction'"),
    ],
)
def test_numeric_settings_are_checked(settings: dict[str, Any], problem: str) -> None:
    with pytest.raises(SettingsError) as raised:
        NumericMatch.validate_settings(settings)
    assert str(raised.value).startswith(problem)
