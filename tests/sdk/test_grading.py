"""When the grader runs, what it must report, and why a row was not graded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from osmo_run import (
    AgentWorkflow,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    ErrorCategory,
    ExecutionResult,
    Grader,
    GraderContext,
    Phase,
    RolloutStatus,
)
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


def test_a_grader_changing_the_sample_never_changes_what_the_workflow_returned() -> None:
    """In process the grader works on the row's own result (not a copy of all of it), but
    on a sample of its own: a grader that appends a message and adds a metric changes the
    row's final sample, never the list and dict a workflow (here one instance shared by
    every row) returned, nor the row's prompt; each row's final result is its own."""
    messages: list[dict[str, Any]] = [{"role": "assistant", "content": "hi"}]
    metrics: dict[str, float] = {}

    class SharedOutput(AgentWorkflow):
        async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
            return AgentWorkflowOutput(messages, metrics=metrics)

    class Appending(Grader):
        async def grade(self, ctx: GraderContext) -> float:
            assert ctx.sample is not None
            ctx.sample.messages.append({"role": "user", "content": "graded"})
            ctx.sample.metrics["graded"] = 1.0
            return 1.0

    backend = LocalBackend(SharedOutput(), grader=Appending)
    requests = [make_request(label="hi", row_id=f"r{i}") for i in range(2)]

    async def both() -> list[ExecutionResult]:
        return [await backend.run_rollout(request) for request in requests]

    finals = asyncio.run(both())
    for final in finals:
        assert final.status is RolloutStatus.SUCCESS and final.reward == 1.0
        assert final.sample is not None and final.sample.metrics == {"graded": 1.0}
        assert [m["content"] for m in final.sample.messages] == ["hi", "graded"]
    assert messages == [{"role": "assistant", "content": "hi"}] and metrics == {}
    assert finals[0].sample is not finals[1].sample
    assert all(len(r.prompt) == 1 for r in requests)
