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
from osmo_run.testing import run_workflow
from tests.workflows import DoubleSourceWorkflow, ScriptedWorkflow, SourceWorkflow

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


def test_none_without_a_sample_source_succeeds_with_no_sample() -> None:
    result = _run(ScriptedWorkflow, {"returns": "none"})
    assert result.status is RolloutStatus.SUCCESS
    assert result.sample is None


@pytest.mark.parametrize(
    ("returns", "fragment"),
    [
        ("str", "run() returned str; return a list of messages"),
        ("bad_metrics", "metrics['turns'] must be a number"),
    ],
)
def test_unusable_return_value_is_a_validation_error(returns: str, fragment: str) -> None:
    result = _run(ScriptedWorkflow, {"returns": returns})
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.VALIDATION_ERROR
    assert result.error_phase is Phase.WORKFLOW
    assert result.error_message is not None and fragment in result.error_message


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
