"""What ``run()`` may return, and the sample each return value becomes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from osmo_run import (
    ErrorCategory,
    ExecutionResult,
    Phase,
    RolloutStatus,
    get_rollout_context,
)
from osmo_run.testing import run_rollout, run_workflow
from tests.workflows import (
    DoubleSourceWorkflow,
    ScriptedGrader,
    ScriptedWorkflow,
    SourceWorkflow,
)

ANSWER = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hi"}]


def _run(workflow: Any, metadata: dict[str, Any] | None = None) -> ExecutionResult:
    return asyncio.run(run_workflow(workflow, "hi", metadata=metadata, timeout_sec=5))


def test_message_list_becomes_the_sample() -> None:
    result = _run(ScriptedWorkflow, {"returns": "messages"})
    assert result.status is RolloutStatus.SUCCESS
    assert result.sample is not None
    assert result.sample.messages == ANSWER
    assert result.sample.metrics == {}
    assert result.info == {}


def test_agent_workflow_output_carries_messages_metrics_and_info() -> None:
    result = _run(ScriptedWorkflow, {"returns": "output"})
    assert result.status is RolloutStatus.SUCCESS
    assert result.sample is not None
    assert result.sample.messages == ANSWER
    assert result.sample.metrics == {"turns": 1}
    assert result.info == {"note": "hi"}


def test_none_with_a_registered_sample_source_takes_the_sources_sample() -> None:
    result = _run(SourceWorkflow)
    assert result.status is RolloutStatus.SUCCESS
    assert result.sample is not None
    assert result.sample.messages == [*ANSWER[:1], {"role": "assistant", "content": "from source"}]
    assert result.sample.metrics == {"from_source": 1}


@pytest.mark.parametrize(
    ("returns", "fragment"),
    [
        ("str", "run() returned str; return the conversation (a list of messages"),
        ("none", "run() returned None and no sample source is registered; return the conv"),
        ("output_without_messages", "run() returned AgentWorkflowOutput without messages and"),
    ],
)
def test_unusable_return_value_is_a_validation_error(returns: str, fragment: str) -> None:
    result = _run(ScriptedWorkflow, {"returns": returns})
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.VALIDATION_ERROR
    assert result.error_phase is Phase.WORKFLOW
    assert result.error_message is not None and fragment in result.error_message


def test_none_without_a_sample_source_is_never_graded() -> None:
    """The grader is not run on a sample that does not exist: the workflow takes the blame."""
    result = asyncio.run(
        run_rollout(
            ScriptedWorkflow, "hi", label="hi", grader=ScriptedGrader, metadata={"returns": "none"}
        )
    )
    assert (result.error_category, result.error_phase) == (
        ErrorCategory.VALIDATION_ERROR,
        Phase.WORKFLOW,
    )
    assert result.timings.grader_sec is None
    assert result.error_message is not None
    assert "register a SampleSource (get_rollout_context().register_sample_source" in (
        result.error_message
    )


def test_a_metric_that_is_not_a_number_is_dropped_with_a_warning() -> None:
    result = _run(ScriptedWorkflow, {"returns": "bad_metrics"})
    assert result.status is RolloutStatus.SUCCESS
    assert result.sample is not None and result.sample.metrics == {}
    assert result.warnings == ["metrics must be finite numbers; dropped 'turns' (str 'one')"]


def test_second_sample_source_registration_raises() -> None:
    result = _run(DoubleSourceWorkflow)
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.AGENT_ERROR
    assert result.error_message is not None
    assert result.error_message.startswith(
        "RuntimeError: a sample source is already registered for this rollout"
    )


def test_rollout_context_is_unavailable_outside_a_rollout() -> None:
    with pytest.raises(RuntimeError, match="no rollout is running here"):
        get_rollout_context()
