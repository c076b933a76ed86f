"""MathEquivalence through the real math-verify: LaTeX, ``\\boxed{}``, fractions, sets,
intervals and expressions; and the error that names the pip command without it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from osmo_run import ErrorCategory, Phase, RolloutStatus
from osmo_run.errors import BackendUnavailable, SpecError
from osmo_run.graders import MathEquivalence, math_equivalence
from osmo_run.graders.settings import SettingsError
from osmo_run.graders.workers import GraderWorkers
from osmo_run.run.configuring.user_code import check_grader_settings
from tests.graders.conftest import explanation, grade
from tests.llm.conftest import require_extra

require_extra("math_verify", "math")

EQUIVALENT: list[tuple[Any, str, float]] = [
    ("\\frac{1}{2}", "The answer is $\\boxed{0.5}$", 1.0),
    ("1/2", "\\boxed{\\frac{1}{2}}", 1.0),
    ("0.5", "So we get $\\frac{1}{2}$.", 1.0),
    ("\\frac12", "1/2", 1.0),
    ("\\dfrac{3}{4}", "$\\boxed{0.75}$", 1.0),
    ("\\frac{\\sqrt{2}}{2}", "$\\frac{1}{\\sqrt{2}}$", 1.0),  # plain LaTeX label, read whole
    ("\\{1,2\\}", "the set is $\\boxed{\\{2, 1\\}}$", 1.0),  # sets ignore order
    ("\\{1,2\\}", "$\\boxed{\\{1, 3\\}}$", 0.0),
    ("(1,2)", "$(1,2]$", 0.0),  # an open and a half-open interval
    ("[1,2]", "$\\boxed{[1, 2]}$", 1.0),
    ("x^2+2x+1", "$(x+1)^2$", 1.0),
    ("-3", "$\\boxed{\u22123}$", 1.0),  # the Unicode minus sign
    ("\u22123", "-3", 1.0),
    ("1,234", "$\\boxed{1234}$", 1.0),
    (3, "First I got 2, then $\\boxed{3}$", 1.0),  # the boxed answer, a number label
    (3, "$\\boxed{4}$", 0.0),
    ("\\pi", "3.14159265", 1.0),
    ("2", "I do not know", 0.0),
]


@pytest.mark.parametrize(("label", "answer", "reward"), EQUIVALENT)
def test_math_equivalence(label: Any, answer: str, reward: float) -> None:
    result = grade(MathEquivalence, label, answer)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward, explanation(result)


def test_explains_both_sides_as_math_verify_reads_them() -> None:
    result = grade(MathEquivalence, "\\frac{1}{2}", "so \\boxed{0.75}")
    assert explanation(result) == (
        "answer 0.75 does not equal label \\frac{1}{2} (as math-verify extracted them; the "
        "answer from 'so \\\\boxed{0.75}')"
    )
    nothing = grade(MathEquivalence, "2", "I do not know")
    assert explanation(nothing).startswith("math-verify found no answer in 'I do not know'")


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ({"x": 1}, "MathEquivalence: the label must be a string (LaTeX or plain) or a number"),
        (True, "MathEquivalence: the label must be a string (LaTeX or plain) or a number"),
        ("", "MathEquivalence: math-verify cannot read the label"),
    ],
)
def test_a_label_it_cannot_use_is_a_grader_validation_error(label: Any, message: str) -> None:
    result = grade(MathEquivalence, label, "\\boxed{1}")
    assert result.status is RolloutStatus.FAILURE
    assert (result.error_category, result.error_phase) == (
        ErrorCategory.VALIDATION_ERROR,
        Phase.GRADER,
    )
    assert result.error_message is not None and message in result.error_message


def test_settings_are_checked() -> None:
    with pytest.raises(SettingsError, match=r"settings\.float_rounding: must be at least 1"):
        MathEquivalence.validate_settings({"float_rounding": 0})


def test_without_math_verify_the_run_stops_naming_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``sys.modules[name] = None`` makes ``import name`` fail as if it were not installed
    here; a package of that name that fails to import, first on the path, does so in the
    grader worker process (a new pool: it starts with this path)."""
    monkeypatch.setitem(sys.modules, "math_verify", None)
    (tmp_path / "math_verify").mkdir()
    (tmp_path / "math_verify" / "__init__.py").write_text(
        "raise ImportError(\"No module named 'math_verify'\")\n"
    )
    monkeypatch.syspath_prepend(tmp_path)
    workers = GraderWorkers(1)
    monkeypatch.setattr(math_equivalence, "GRADER_WORKERS", workers)
    with pytest.raises(BackendUnavailable) as raised:
        check_grader_settings("osmo_run.graders:MathEquivalence", {}, judge=False)
    assert "pip install 'osmo-run[math]'" in str(raised.value)
    assert raised.value.exit_code == 2
    # and a row graded where it is missing (a sandbox image without it) says the same
    result = grade(MathEquivalence, "1", "1")
    assert result.status is RolloutStatus.FAILURE
    assert result.error_phase is Phase.GRADER
    assert result.error_message is not None
    assert "MathEquivalence needs math-verify" in result.error_message
    assert "pip install 'osmo-run[math]'" in result.error_message
    workers.kill_all()


def test_a_harbor_run_does_not_demand_the_extra_on_the_host_but_checks_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The trial's image may have math-verify when this host does not."""
    monkeypatch.setitem(sys.modules, "math_verify", None)
    check = check_grader_settings
    check("osmo_run.graders:MathEquivalence", {}, judge=False, tolerate_missing_deps=True)
    with pytest.raises(SpecError, match=r"grader_config\.settings\.float_rounding: must be at"):
        check(
            "osmo_run.graders:MathEquivalence",
            {"float_rounding": 0},
            judge=False,
            tolerate_missing_deps=True,
        )
