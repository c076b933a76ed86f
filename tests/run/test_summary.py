"""Run statistics: failures count as reward 0 in mean_all, and nothing is dropped."""

from __future__ import annotations

import pytest

from osmo_run import ErrorCategory, ExecutionResult, Phase, RolloutSample, RolloutStatus, Timings
from osmo_run.run.reporting.stats import percentile
from osmo_run.run.reporting.summary import SummaryBuilder
from osmo_run.run.writing.records import record_dict


def _result(
    status: RolloutStatus,
    reward: float | None = None,
    category: ErrorCategory | None = None,
    skipped: str | None = None,
    seconds: float = 1.0,
) -> ExecutionResult:
    return ExecutionResult(
        rollout_id="r",
        status=status,
        sample=RolloutSample(reward=reward),
        error_category=category,
        error_phase=None if category is None else Phase.WORKFLOW,
        grader_skipped=skipped,
        timings=Timings(total_sec=seconds),
    )


def _summary() -> SummaryBuilder:
    builder = SummaryBuilder()
    builder.add_record(record_dict("r", 0, 1, _result(RolloutStatus.SUCCESS, 1.0, seconds=1.0)))
    builder.add_record(record_dict("r", 0, 1, _result(RolloutStatus.SUCCESS, 0.5, seconds=2.0)))
    builder.add_record(
        record_dict(
            "r", 0, 1, _result(RolloutStatus.SUCCESS, skipped="row has no label", seconds=3.0)
        )
    )
    builder.add_record(
        record_dict(
            "r", 0, 1, _result(RolloutStatus.FAILURE, category=ErrorCategory.TIMEOUT, seconds=4.0)
        )
    )
    builder.add_record(
        record_dict(
            "r",
            0,
            1,
            _result(RolloutStatus.CANCELLED, category=ErrorCategory.CANCELLED, seconds=5.0),
        )
    )
    return builder


def test_mean_all_counts_rows_without_reward_as_zero() -> None:
    summary = _summary().build()
    assert summary.total == 5
    assert summary.graded == 2
    assert summary.mean_reward_all == pytest.approx(1.5 / 5)
    assert summary.mean_reward_graded == pytest.approx(0.75)
    assert (summary.reward_min, summary.reward_max) == (0.5, 1.0)


def test_statuses_categories_and_skips_are_counted() -> None:
    builder = _summary()
    summary = builder.build(output="out.jsonl", interrupted=True)
    assert summary.by_status == {"success": 3, "failure": 1, "cancelled": 1}
    assert summary.error_categories == {"timeout": 1, "cancelled": 1}
    assert summary.grader_skipped == {"row has no label": 1}
    assert summary.failed == builder.failed == 2
    saved = summary.to_dict()
    reward = saved["reward"]
    assert (reward["mean_graded"], reward["mean_all"], reward["min"], reward["max"]) == (
        0.75,
        0.3,
        0.5,
        1.0,
    )
    assert saved["coverage"] == pytest.approx(2 / 5)
    assert (saved["output"], saved["interrupted"]) == ("out.jsonl", True)


def test_durations_report_percentiles() -> None:
    summary = _summary().build()
    assert summary.duration_p50 == 3.0
    assert summary.duration_p95 == pytest.approx(4.8)
    assert summary.duration_max == 5.0


def test_reward_on_a_failed_row_is_not_counted_as_graded() -> None:
    builder = SummaryBuilder()
    builder.add_record(
        record_dict(
            "r", 0, 1, _result(RolloutStatus.FAILURE, 1.0, category=ErrorCategory.AGENT_ERROR)
        )
    )
    summary = builder.build()
    assert summary.graded == 0
    assert summary.mean_reward_all == 0.0
    assert summary.mean_reward_graded is None


def test_empty_run_has_no_means() -> None:
    summary = SummaryBuilder().build()
    assert (summary.total, summary.mean_reward_all, summary.duration_p50) == (0, None, None)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 0.5, None),
        ([7.0], 0.95, 7.0),
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),
        ([0.0, 10.0], 0.9, 9.0),
    ],
)
def test_percentile_interpolates_linearly(
    values: list[float], q: float, expected: float | None
) -> None:
    assert percentile(values, q) == expected


def test_a_run_with_nothing_graded_claims_no_interval_for_rewards_it_never_saw() -> None:
    builder = SummaryBuilder()
    for _ in range(5):
        builder.add_values("success", None, None, "no grader configured", 1.0)
    summary = builder.build()
    assert summary.all_estimate is not None and summary.pass_estimate is not None
    assert (summary.all_estimate.mean, summary.all_estimate.ci_low) == (0.0, None)
    assert (summary.pass_estimate.mean, summary.pass_estimate.ci_low) == (0.0, None)
    assert summary.to_dict()["pass"]["ci95"] is None
