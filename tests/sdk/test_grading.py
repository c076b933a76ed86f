"""When the grader runs, what it must report, and why a row was not graded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from osmo_run import ErrorCategory, ExecutionResult, Grader, Phase, RolloutStatus
from osmo_run.backends.local import LocalBackend
from tests.conftest import make_request
from tests.workflows import ScriptedGrader, ScriptedWorkflow


def _final(
    grader: type[Grader] | None, metadata: dict[str, Any] | None = None, label: Any = "hi"
) -> ExecutionResult:
    """The final result of one row run through a LocalBackend."""
    results: list[ExecutionResult] = []
    backend = LocalBackend(ScriptedWorkflow, grader=grader)
    asyncio.run(backend.execute(make_request(metadata, label=label), results.append))
    assert len(results) == 1
    return results[0]


def test_without_a_grader_the_row_succeeds_ungraded() -> None:
    result = _final(None)
    assert result.status is RolloutStatus.SUCCESS
    assert result.grader_skipped == "no grader configured"
    assert result.reward is None


def test_row_without_a_label_is_not_graded() -> None:
    result = _final(ScriptedGrader, {"grade": "raise:RuntimeError"}, label=None)
    assert result.status is RolloutStatus.SUCCESS
    assert result.grader_skipped == "row has no label"
    assert result.timings.grader_sec is None


def test_failed_workflow_is_not_graded_and_has_no_skip_reason() -> None:
    result = _final(ScriptedGrader, {"raise": "ValueError"})
    assert result.status is RolloutStatus.FAILURE
    assert result.error_phase is Phase.WORKFLOW
    assert result.grader_skipped is None
    assert result.timings.grader_sec is None


@pytest.mark.parametrize(("label", "reward"), [("hi", 1.0), ("bye", 0.0)])
def test_number_returned_by_the_grader_is_the_reward(label: str, reward: float) -> None:
    result = _final(ScriptedGrader, label=label)
    assert result.status is RolloutStatus.SUCCESS
    assert result.reward == reward
    assert result.grader_skipped is None
    assert result.timings.grader_sec is not None


def test_reward_set_on_the_context_counts_when_grade_returns_none() -> None:
    result = _final(ScriptedGrader, {"grade": "set"})
    assert result.status is RolloutStatus.SUCCESS
    assert result.reward == 0.25


def test_grader_returning_without_a_reward_is_a_validation_error_that_keeps_the_sample() -> None:
    result = _final(ScriptedGrader, {"grade": "none"})
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.VALIDATION_ERROR
    assert result.error_phase is Phase.GRADER
    assert result.error_message is not None
    assert "grade() returned without a reward" in result.error_message
    assert result.sample is not None
    assert result.sample.messages[-1] == {"role": "assistant", "content": "hi"}


def test_nan_reward_is_a_validation_error() -> None:
    result = _final(ScriptedGrader, {"grade": "nan"})
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.VALIDATION_ERROR
    assert result.error_phase is Phase.GRADER
    assert result.error_message is not None and "reward must be finite" in result.error_message
    assert result.reward is None
