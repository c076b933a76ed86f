"""Quality gates and error budgets (``osmo_run.run.reporting.gates``) at and around their
thresholds, and the exit code of a finished run (``exit_code_for``) as a table.

The exit codes end to end through the real CLI are in ``tests/cli/test_ci.py``; 130
(interrupted) end to end is ``tests/cli/test_interrupt.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from osmo_run.errors import ExitCode, InputError
from osmo_run.run.controls.breaker import BreakerTrip
from osmo_run.run.executing.finish import exit_code_for
from osmo_run.run.reporting.gates import ErrorBudget, GateFailure, Gates, evaluate, parse_budget
from osmo_run.run.reporting.summary import RunSummary, SummaryBuilder
from osmo_run.sdk.model_budget import BudgetSpent


def run_summary(
    rewards: Sequence[float | None] = (),
    errors: dict[str, int] | None = None,
    cancelled: int = 0,
    threshold: float = 1.0,
    interrupted: bool = False,
) -> RunSummary:
    """A summary of successful rollouts with ``rewards`` (``None``: not graded), failed
    rollouts per error category, and cancelled ones."""
    builder = SummaryBuilder(pass_threshold=threshold)
    for reward in rewards:
        skipped = "row has no label" if reward is None else None
        builder.add_values("success", None, reward, skipped, 0.1)
    for category, count in (errors or {}).items():
        for _ in range(count):
            builder.add_values("failure", category, None, None, 0.1)
    for _ in range(cancelled):
        builder.add_values("cancelled", "cancelled", None, None, 0.1)
    return builder.build(interrupted=interrupted)


def budget(value: str, rate: bool = False) -> Gates:
    return Gates(budgets=(parse_budget(value, rate),))


# --- parse_budget -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "rate", "expected"),
    [
        ("5", False, ErrorBudget(5, False)),
        ("0", False, ErrorBudget(0, False)),
        ("timeout=1", False, ErrorBudget(1, False, "timeout")),
        ("0.1", True, ErrorBudget(0.1, True)),
        ("1", True, ErrorBudget(1, True)),
        ("agent_error=0.25", True, ErrorBudget(0.25, True, "agent_error")),
    ],
)
def test_parse_budget_accepts_a_number_or_category_and_number(
    value: str, rate: bool, expected: ErrorBudget
) -> None:
    assert parse_budget(value, rate) == expected


@pytest.mark.parametrize(
    ("value", "rate", "message"),
    [
        ("five", False, "'five' is not a number"),
        ("", False, "is not a number"),
        ("timeout=", False, "'' is not a number"),
        ("bogus=1", False, "'bogus' is not an error category"),
        ("=1", False, "'' is not an error category"),
        ("-1", False, "must be a whole number"),
        ("1.5", False, "must be a whole number"),
        ("1.5", True, "must be a fraction from 0 to 1"),
        ("-0.1", True, "must be a fraction from 0 to 1"),
        ("nan", False, "must be a whole number"),
        ("inf", False, "must be a whole number"),
        ("nan", True, "must be a fraction from 0 to 1"),
        ("timeout=nan", True, "must be a fraction from 0 to 1"),
    ],
)
def test_parse_budget_refuses_bad_values_naming_the_flag(
    value: str, rate: bool, message: str
) -> None:
    flag = "--max-error-rate" if rate else "--max-errors"
    with pytest.raises(InputError) as caught:
        parse_budget(value, rate)
    assert str(caught.value).startswith(f"{flag}: ")
    assert message in str(caught.value)


def test_unknown_category_error_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"agent_error.*timeout"):
        parse_budget("timeouts=1", rate=False)


# --- no gate ----------------------------------------------------------------------------


def test_without_gates_a_clean_run_passes() -> None:
    assert evaluate(run_summary([1.0, 0.0, None]), Gates()) == []


@pytest.mark.parametrize(
    "summary",
    [run_summary([1.0], {"timeout": 1}), run_summary([1.0], cancelled=1)],
    ids=["failure", "cancelled"],
)
def test_without_gates_any_failed_rollout_fails_the_run(summary: RunSummary) -> None:
    (failure,) = evaluate(summary, Gates())
    assert failure.kind == "rollouts"
    assert failure.measured == 1


def test_with_gates_failed_rollouts_within_budget_do_not_fail_the_run() -> None:
    summary = run_summary([1.0, 1.0, 1.0], {"timeout": 1})
    assert evaluate(summary, Gates(fail_under=0.75)) == []
    assert evaluate(summary, Gates(min_pass_rate=0.75)) == []
    assert evaluate(summary, budget("1")) == []
    assert evaluate(summary, budget("0.25", rate=True)) == []


# --- --fail-under -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rewards", "gate", "passes"),
    [
        ([1.0, 0.5, 0.0], 0.5, True),  # exactly equal
        ([1.0, 0.5, 0.0], 0.5001, False),  # just above
        ([1.0, 0.5, 0.0], 0.4999, True),
        ([0.7, 0.1], 0.4, True),  # 0.7 + 0.1 is 0.7999999999999999 in binary: still equal
        ([0.1, 0.2, 0.3], 0.2, True),
        ([0.1, 0.2, 0.3], 0.2000001, False),
        ([1.0], 1.0, True),
        ([0.0], 0.0, True),
    ],
)
def test_fail_under_holds_at_the_threshold_and_fails_just_above(
    rewards: list[float], gate: float, passes: bool
) -> None:
    failures = evaluate(run_summary(rewards), Gates(fail_under=gate))
    assert (failures == []) is passes
    if not passes:
        (failure,) = failures
        assert failure.kind == "quality"
        assert failure.threshold == gate


def test_fail_under_counts_failed_and_ungraded_rollouts_as_0() -> None:
    summary = run_summary([1.0, None], {"agent_error": 2})  # mean over all four: 0.25
    assert evaluate(summary, Gates(fail_under=0.25)) == []
    (failure,) = evaluate(summary, Gates(fail_under=0.26))
    assert failure.measured == pytest.approx(0.25)


def test_a_run_of_no_rollouts_passes_every_gate() -> None:
    """Only an empty shard runs nothing (an empty dataset is refused): there is nothing to
    judge, and an array job's extra shards must not fail."""
    gates = Gates(fail_under=0.1, min_pass_rate=1.0, budgets=(parse_budget("0", rate=True),))
    assert evaluate(run_summary([]), gates) == []


# --- --min-pass-rate --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gate", "passes"), [(0.75, True), (0.7, True), (0.7500001, False), (0.76, False)]
)
def test_min_pass_rate_holds_at_the_threshold_and_fails_just_above(
    gate: float, passes: bool
) -> None:
    summary = run_summary([1.0, 0.9, 0.5, 0.4], threshold=0.5)  # 3 of 4 reach 0.5
    assert summary.pass_rate == 0.75
    failures = evaluate(summary, Gates(min_pass_rate=gate))
    assert (failures == []) is passes


def test_min_pass_rate_counts_failed_rollouts_as_not_passed() -> None:
    summary = run_summary([1.0, 1.0, 1.0], {"timeout": 7})
    assert evaluate(summary, Gates(min_pass_rate=0.3)) == []
    (failure,) = evaluate(summary, Gates(min_pass_rate=0.31))
    assert failure.measured == pytest.approx(0.3)
    assert failure.gate == "--min-pass-rate"


# --- --max-errors -----------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "passes"), [(3, True), (4, True), (2, False), (0, False)])
def test_max_errors_allows_n_failures_and_fails_at_n_plus_1(limit: int, passes: bool) -> None:
    summary = run_summary([1.0], {"timeout": 2}, cancelled=1)  # cancelled count as errors
    failures = evaluate(summary, budget(str(limit)))
    assert (failures == []) is passes
    if not passes:
        (failure,) = failures
        assert (failure.kind, failure.measured, failure.threshold) == ("budget", 3, limit)


def test_max_errors_zero_with_a_clean_run_passes() -> None:
    assert evaluate(run_summary([0.0, 0.0]), budget("0")) == []


@pytest.mark.parametrize(
    ("value", "passes"),
    [
        ("timeout=1", True),  # one timeout: within its budget, agent errors are not counted
        ("timeout=0", False),
        ("agent_error=3", True),
        ("agent_error=2", False),
        ("rate_limit=0", True),  # a category with no failure at all
    ],
)
def test_max_errors_per_category_counts_only_that_category(value: str, passes: bool) -> None:
    summary = run_summary([1.0], {"timeout": 1, "agent_error": 3})
    failures = evaluate(summary, budget(value))
    assert (failures == []) is passes
    if not passes:
        assert failures[0].gate == f"--max-errors ({value.split('=')[0]})"


def test_several_budgets_report_each_that_failed() -> None:
    summary = run_summary([1.0], {"timeout": 2, "agent_error": 1})
    gates = Gates(
        budgets=(
            parse_budget("timeout=1", False),
            parse_budget("agent_error=1", False),
            parse_budget("2", False),
        )
    )
    failures = evaluate(summary, gates)
    assert [f.gate for f in failures] == ["--max-errors (timeout)", "--max-errors"]


# --- --max-error-rate -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "passes"),
    [
        ("0.3", True),  # exactly 3 of 10
        ("0.3000001", True),
        ("0.2999999", False),
        ("0.2", False),
        ("timeout=0.2", True),  # 2 of 10
        ("timeout=0.19", False),
        ("agent_error=0.1", True),
        ("agent_error=0", False),
    ],
)
def test_max_error_rate_holds_at_the_threshold_and_fails_just_above_it(
    value: str, passes: bool
) -> None:
    summary = run_summary([1.0] * 7, {"timeout": 2, "agent_error": 1})
    failures = evaluate(summary, budget(value, rate=True))
    assert (failures == []) is passes
    if not passes:
        (failure,) = failures
        assert failure.kind == "budget"
        assert failure.gate.startswith("--max-error-rate")


def test_max_error_rate_with_nothing_run_measures_0() -> None:
    assert evaluate(run_summary([]), budget("0", rate=True)) == []


# --- the gate line ----------------------------------------------------------------------


def test_gate_lines_name_the_gate_the_measured_value_and_the_threshold() -> None:
    summary = run_summary([1.0, 0.5, 0.0, 0.0], {"timeout": 2})
    gates = Gates(
        fail_under=0.5,
        min_pass_rate=0.5,
        budgets=(parse_budget("1", False), parse_budget("timeout=0.25", True)),
    )
    lines = [failure.line() for failure in evaluate(summary, gates)]
    assert lines == [
        "gate failed: --max-errors measured 2, above the maximum 1",
        "gate failed: --max-error-rate (timeout) measured 0.3333, above the maximum 0.25",
        "gate failed: --fail-under (mean reward, failures as 0) measured 0.25, "
        "below the minimum 0.5",
        "gate failed: --min-pass-rate measured 0.1667, below the minimum 0.5",
    ]


def test_gate_line_never_shows_equal_numbers_for_different_values() -> None:
    line = GateFailure("--fail-under", 0.49999, 0.5, "quality").line()
    measured, threshold = line.removeprefix("gate failed: --fail-under measured ").split(
        ", below the minimum "
    )
    assert measured != threshold
    assert float(measured) < float(threshold)


# --- exit_code_for ----------------------------------------------------------------------

QUALITY = GateFailure("--fail-under", 0.2, 0.5, "quality")
BUDGET = GateFailure("--max-errors", 3, 1, "budget")
ROLLOUTS = GateFailure("failed rollouts", 1, 0, "rollouts")


@pytest.mark.parametrize(
    ("summary", "failures", "code"),
    [
        (run_summary([1.0, 0.0]), None, ExitCode.OK),
        (run_summary([1.0, 0.0]), [], ExitCode.OK),
        (run_summary([1.0], {"timeout": 1}), None, ExitCode.ROLLOUTS_FAILED),
        (run_summary([1.0], cancelled=1), None, ExitCode.ROLLOUTS_FAILED),
        (run_summary([1.0], {"timeout": 1}), [ROLLOUTS], ExitCode.ROLLOUTS_FAILED),
        (run_summary([1.0], {"timeout": 1}), [], ExitCode.OK),  # gates held
        (run_summary([0.2]), [QUALITY], ExitCode.ROLLOUTS_FAILED),
        (run_summary([1.0], {"timeout": 3}), [BUDGET], ExitCode.ERROR_BUDGET_EXCEEDED),
        (run_summary([0.2], {"timeout": 3}), [QUALITY, BUDGET], ExitCode.ERROR_BUDGET_EXCEEDED),
        (run_summary([0.2], {"timeout": 3}), [BUDGET, QUALITY], ExitCode.ERROR_BUDGET_EXCEEDED),
        (run_summary([1.0], cancelled=1, interrupted=True), None, ExitCode.INTERRUPTED),
        (run_summary([1.0], cancelled=1, interrupted=True), [BUDGET], ExitCode.INTERRUPTED),
        (run_summary([1.0], interrupted=True), [], ExitCode.INTERRUPTED),
    ],
)
def test_exit_code_for_a_finished_run(
    summary: RunSummary, failures: list[GateFailure] | None, code: ExitCode
) -> None:
    assert exit_code_for(summary, failures) is code


def test_a_run_the_breaker_stopped_exits_5_whatever_the_gates_say_but_ctrl_c_wins() -> None:
    stopped = run_summary([1.0], {"infra_error": 5})
    stopped.breaker = BreakerTrip(5, "infra_error", "infra_error: engine gone", "engine gone")
    assert exit_code_for(stopped, []) is ExitCode.SYSTEMIC_FAILURE
    assert exit_code_for(stopped, [BUDGET]) is ExitCode.SYSTEMIC_FAILURE
    stopped.interrupted = True
    assert exit_code_for(stopped, []) is ExitCode.INTERRUPTED


def test_a_run_its_model_budget_stopped_exits_6_whatever_the_gates_say() -> None:
    stopped = run_summary([1.0], {"budget_exceeded": 1})
    stopped.budget = BudgetSpent("tokens 1,010 of 1,000", 1010, 0.0, 67, 3)
    assert exit_code_for(stopped, []) is ExitCode.BUDGET_SPENT
    assert exit_code_for(stopped, [BUDGET]) is ExitCode.BUDGET_SPENT
    stopped.interrupted = True
    assert exit_code_for(stopped, []) is ExitCode.INTERRUPTED


def test_exit_codes_are_the_documented_numbers() -> None:
    assert {code.name: int(code) for code in ExitCode} == {
        "OK": 0,
        "ROLLOUTS_FAILED": 1,
        "INVALID_INPUT": 2,
        "INTERNAL_ERROR": 3,
        "ERROR_BUDGET_EXCEEDED": 4,
        "SYSTEMIC_FAILURE": 5,
        "BUDGET_SPENT": 6,
        "INTERRUPTED": 130,
    }


@pytest.mark.parametrize(
    ("gates", "code"),
    [
        (Gates(), ExitCode.ROLLOUTS_FAILED),
        (Gates(fail_under=0.5), ExitCode.OK),
        (Gates(fail_under=0.6), ExitCode.ROLLOUTS_FAILED),
        (Gates(min_pass_rate=0.6), ExitCode.ROLLOUTS_FAILED),
        (Gates(budgets=(ErrorBudget(1, False),)), ExitCode.OK),
        (Gates(budgets=(ErrorBudget(0, False),)), ExitCode.ERROR_BUDGET_EXCEEDED),
        (
            Gates(fail_under=0.6, budgets=(ErrorBudget(0, False),)),
            ExitCode.ERROR_BUDGET_EXCEEDED,
        ),
    ],
)
def test_evaluate_then_exit_code_for(gates: Gates, code: ExitCode) -> None:
    summary = run_summary([1.0, 0.5, 0.5], {"timeout": 1})  # mean 0.5, pass rate 0.25
    assert exit_code_for(summary, evaluate(summary, gates)) is code
