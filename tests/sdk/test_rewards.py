"""A reward is a finite number wherever it is set, and a grader reports exactly one."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from osmo_run import ErrorCategory, ExecutionResult, Phase, RolloutSample, RolloutStatus
from osmo_run.testing import run_rollout
from tests.compat_workflows import CompatGrader, CompatWorkflow


def _rollout(metadata: dict[str, Any]) -> ExecutionResult:
    return asyncio.run(
        run_rollout(CompatWorkflow, "hi", label="hi", grader=CompatGrader, metadata=metadata)
    )


def _assert_validation_error(result: ExecutionResult, phase: Phase, fragment: str) -> None:
    assert (result.status, result.error_category, result.error_phase) == (
        RolloutStatus.FAILURE,
        ErrorCategory.VALIDATION_ERROR,
        phase,
    ), result.error_message
    assert fragment in (result.error_message or ""), result.error_message
    assert result.reward is None


@pytest.mark.parametrize("bad", ["high", math.nan, math.inf, True])
def test_a_sample_source_setting_a_bad_reward_fails_where_it_sets_it(bad: Any) -> None:
    """Never a success row with ``"reward": "high"``, and never a NaN lost when written."""
    result = _rollout({"source_reward": bad, "grade": "return:1"})
    _assert_validation_error(result, Phase.WORKFLOW, "reward must be")
    assert "in get_sample" in (result.error_message or "")  # where it was set


def test_a_reward_on_the_sample_is_validated_on_every_assignment() -> None:
    sample = RolloutSample()
    sample.reward = 1  # an int is a number
    assert sample.reward == 1.0 and isinstance(sample.reward, float)
    with pytest.raises(ValueError, match="reward must be a number, got str 'high'"):
        sample.reward = "high"  # type: ignore[assignment]
    with pytest.raises(ValueError, match="reward must be finite, got nan"):
        RolloutSample(reward=math.nan)
    assert sample.reward == 1.0  # a refused assignment changes nothing
    sample.reward = None
    assert sample.reward is None


def test_a_grader_assigning_the_samples_reward_reports_it() -> None:
    result = _rollout({"grade": "assign:0.7"})
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == 0.7


def test_a_grader_assigning_a_bad_reward_is_a_validation_error_of_the_grader() -> None:
    result = _rollout({"grade": "assign:high"})
    _assert_validation_error(result, Phase.GRADER, "reward must be a number, got str 'high'")
    assert result.sample is not None and result.sample.messages  # the sample is kept


def test_a_reward_too_large_for_a_float_is_a_validation_error() -> None:
    result = _rollout({"grade": "big"})
    _assert_validation_error(result, Phase.GRADER, "reward must be finite")


def test_a_numpy_reward_is_a_reward() -> None:
    result = _rollout({"grade": "numpy"})
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == 0.5 and type(result.reward) is float


def test_two_different_rewards_from_one_grader_are_refused() -> None:
    result = _rollout({"grade": "set:0.25,return:0.75"})
    _assert_validation_error(
        result,
        Phase.GRADER,
        "the grader reported two different rewards (grade() returned 0.75; "
        "ctx.set_reward() was given 0.25): report one",
    )


def test_the_same_reward_reported_twice_is_one_reward() -> None:
    result = _rollout({"grade": "set:0.25,return:0.25"})
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == 0.25


def test_a_reward_the_sample_source_set_counts_when_the_grader_reports_none() -> None:
    """As in osmosis-ai, where the reward on the sample is the reward."""
    result = _rollout({"source_reward": 0.5, "grade": ""})
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == 0.5


def test_the_graders_reward_replaces_one_the_sample_source_set() -> None:
    result = _rollout({"source_reward": 0.5, "grade": "return:1"})
    assert result.reward == 1.0


def test_a_grader_reporting_no_reward_says_how_to_report_one() -> None:
    result = _rollout({"grade": ""})
    _assert_validation_error(
        result,
        Phase.GRADER,
        "grade() returned without a reward: return it, call ctx.set_reward(value) "
        "or set ctx.sample.reward",
    )
