"""Exceptions from a workflow or a grader become error categories, phases and messages."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import tests.workflows
from osmo_run import (
    AgentWorkflowConfig,
    ErrorCategory,
    ExecutionResult,
    GraderConfig,
    Phase,
    RolloutStatus,
)
from osmo_run.sdk.llm import ModelAPIError, RateLimitError
from osmo_run.sdk.rollout import (
    categorize_exception,
    describe_exception,
    run_grader_phase,
    run_workflow_phase,
)
from tests.conftest import make_request
from tests.workflows import ScriptedGrader, ScriptedWorkflow

WORKFLOWS_PY = Path(tests.workflows.__file__)

CASES = [
    ("TimeoutError", ErrorCategory.TIMEOUT),
    ("ValueError", ErrorCategory.VALIDATION_ERROR),
    ("TypeError", ErrorCategory.VALIDATION_ERROR),
    ("AssertionError", ErrorCategory.VALIDATION_ERROR),
    ("RuntimeError", ErrorCategory.AGENT_ERROR),
    ("KeyError", ErrorCategory.AGENT_ERROR),
    ("ZeroDivisionError", ErrorCategory.AGENT_ERROR),
    ("RateLimitError", ErrorCategory.RATE_LIMIT),
    ("APIConnectionError", ErrorCategory.MODEL_API_ERROR),
]


def _line_of(text: str) -> int:
    lines = WORKFLOWS_PY.read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def _run_workflow(metadata: dict[str, object]) -> ExecutionResult:
    request = make_request(metadata)
    return asyncio.run(run_workflow_phase(request, ScriptedWorkflow, AgentWorkflowConfig()))


def _run_both(metadata: dict[str, object]) -> ExecutionResult:
    async def both() -> ExecutionResult:
        request = make_request(metadata)
        result = await run_workflow_phase(request, ScriptedWorkflow, AgentWorkflowConfig())
        assert result.status is RolloutStatus.SUCCESS
        return await run_grader_phase(request, result, ScriptedGrader, GraderConfig())

    return asyncio.run(both())


@pytest.mark.parametrize(("name", "category"), CASES)
def test_workflow_exception_sets_category_phase_and_location(
    name: str, category: ErrorCategory
) -> None:
    result = _run_workflow({"raise": name})
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is category
    assert result.error_phase is Phase.WORKFLOW
    assert result.sample is None
    line = _line_of('raise ERRORS[meta["raise"]]')
    assert result.error_message is not None
    assert result.error_message.startswith(f"{name}: ")
    assert "scripted " + name in result.error_message
    assert result.error_message.endswith(f"(at {WORKFLOWS_PY}:{line} in run)")


@pytest.mark.parametrize(("name", "category"), CASES)
def test_grader_exception_sets_category_phase_and_keeps_the_sample(
    name: str, category: ErrorCategory
) -> None:
    result = _run_both({"grade": f"raise:{name}"})
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is category
    assert result.error_phase is Phase.GRADER
    assert result.sample is not None
    assert result.sample.messages[-1] == {"role": "assistant", "content": "hi"}
    assert result.reward is None
    line = _line_of("raise ERRORS[name]")
    assert result.error_message is not None
    assert result.error_message.startswith(f"{name}: ")
    assert result.error_message.endswith(f"(at {WORKFLOWS_PY}:{line} in grade)")


def test_categories_follow_class_names_through_subclasses() -> None:
    class ClientRateLimit(tests.workflows.RateLimitError):
        pass

    assert categorize_exception(ClientRateLimit()) is ErrorCategory.RATE_LIMIT
    # the stdlib client's 429 subclasses its ModelAPIError: rate_limit wins
    assert categorize_exception(RateLimitError("429")) is ErrorCategory.RATE_LIMIT
    assert categorize_exception(ModelAPIError("500")) is ErrorCategory.MODEL_API_ERROR


def test_exception_without_message_is_named_by_its_type() -> None:
    try:
        raise RuntimeError
    except RuntimeError as exc:
        text = describe_exception(exc)
    assert text.startswith("RuntimeError (at ")
    assert f"{__file__}:" in text
