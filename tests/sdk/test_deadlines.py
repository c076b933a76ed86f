"""Per-row deadlines hold for well-behaved, blocking and cancellation-ignoring code."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

from osmo_run import (
    AgentWorkflowConfig,
    ErrorCategory,
    ExecutionResult,
    GraderConfig,
    Phase,
    RolloutStatus,
)
from osmo_run.sdk.rollout import CANCEL_GRACE_SEC, run_grader_phase, run_workflow_phase
from tests.conftest import make_request
from tests.workflows import ScriptedGrader, ScriptedWorkflow, StubbornGrader, StubbornWorkflow

DEADLINE = 0.3
SLACK = 0.5
"""How far past a deadline a result may come on a loaded 2-core machine."""


def _timed(coro: Any) -> tuple[ExecutionResult, float]:
    async def timed() -> tuple[ExecutionResult, float]:
        started = time.monotonic()
        result = await coro
        elapsed = time.monotonic() - started
        StubbornWorkflow.release = True  # let an abandoned coroutine end before the loop closes
        return result, elapsed

    return asyncio.run(timed())


def _workflow(workflow: Any, metadata: dict[str, Any], agent_sec: float | None = DEADLINE) -> Any:
    return run_workflow_phase(
        make_request(metadata, agent_sec=agent_sec), workflow, AgentWorkflowConfig()
    )


def _grader(grader: Any, metadata: dict[str, Any]) -> Any:
    async def grade() -> ExecutionResult:
        request = make_request(metadata, grader_sec=DEADLINE)
        result = await run_workflow_phase(request, ScriptedWorkflow, AgentWorkflowConfig())
        assert result.ok
        return await run_grader_phase(request, result, grader, GraderConfig())

    return grade()


def _assert_timeout(result: ExecutionResult, phase: Phase, *fragments: str) -> None:
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.TIMEOUT
    assert result.error_phase is phase
    assert result.error_message is not None
    for fragment in fragments:
        assert fragment in result.error_message


def test_workflow_sleeping_past_its_deadline_times_out_at_the_deadline() -> None:
    result, elapsed = _timed(_workflow(ScriptedWorkflow, {"sleep": 30}))
    _assert_timeout(
        result, Phase.WORKFLOW, "workflow exceeded its 0.3s deadline (agent_timeout_sec)"
    )
    assert "abandoned" not in (result.error_message or "")
    assert DEADLINE <= elapsed < DEADLINE + SLACK
    assert result.timings.workflow_sec is not None and result.timings.workflow_sec >= DEADLINE


def test_workflow_blocking_the_loop_past_its_deadline_times_out_as_returned_late() -> None:
    result, elapsed = _timed(_workflow(ScriptedWorkflow, {"block": DEADLINE + 0.3}))
    _assert_timeout(
        result,
        Phase.WORKFLOW,
        "workflow returned after its 0.3s deadline (agent_timeout_sec)",
        "blocked the event loop",
    )
    assert result.sample is None
    assert elapsed < DEADLINE + 0.3 + SLACK


@pytest.mark.usefixtures("stubborn_released")
def test_workflow_ignoring_cancellation_is_abandoned_after_the_grace() -> None:
    result, elapsed = _timed(_workflow(StubbornWorkflow, {}))
    _assert_timeout(
        result,
        Phase.WORKFLOW,
        "exceeded its 0.3s deadline",
        f"ignored cancellation; abandoned after {CANCEL_GRACE_SEC:g}s",
    )
    assert DEADLINE + CANCEL_GRACE_SEC <= elapsed < DEADLINE + CANCEL_GRACE_SEC + SLACK


def test_workflow_raising_its_own_timeout_error_is_a_timeout() -> None:
    result, elapsed = _timed(_workflow(ScriptedWorkflow, {"raise": "TimeoutError"}))
    _assert_timeout(result, Phase.WORKFLOW, "TimeoutError: scripted TimeoutError (at ")
    assert elapsed < DEADLINE


def test_workflow_without_a_deadline_runs_to_the_end() -> None:
    result, _ = _timed(_workflow(ScriptedWorkflow, {"sleep": DEADLINE + 0.1}, agent_sec=None))
    assert result.status is RolloutStatus.SUCCESS


def test_grader_sleeping_past_its_deadline_times_out_and_keeps_the_sample() -> None:
    result, _ = _timed(_grader(ScriptedGrader, {"grade": "sleep:30"}))
    _assert_timeout(result, Phase.GRADER, "grader exceeded its 0.3s deadline (grader_timeout_sec)")
    assert result.sample is not None and result.sample.messages
    assert result.reward is None
    assert result.timings.grader_sec is not None
    assert DEADLINE <= result.timings.grader_sec < DEADLINE + SLACK


def test_grader_blocking_the_loop_past_its_deadline_times_out_as_returned_late() -> None:
    result, _ = _timed(_grader(ScriptedGrader, {"grade": f"block:{DEADLINE + 0.3}"}))
    _assert_timeout(
        result, Phase.GRADER, "grader returned after its 0.3s deadline (grader_timeout_sec)"
    )
    assert result.reward is None


@pytest.mark.usefixtures("stubborn_released")
def test_grader_ignoring_cancellation_is_abandoned_after_the_grace() -> None:
    result, _ = _timed(_grader(StubbornGrader, {}))
    _assert_timeout(result, Phase.GRADER, "grader exceeded its 0.3s deadline", "abandoned")
    assert result.timings.grader_sec is not None
    assert result.timings.grader_sec < DEADLINE + CANCEL_GRACE_SEC + SLACK


@pytest.mark.parametrize("deadline", [0, 0.0, -1, -0.5])
def test_a_deadline_already_passed_is_a_timeout_result_not_an_exception(deadline: float) -> None:
    """osmosis-ai's contract: zero or less is a deadline that has passed. The workflow
    awaits something, which used to surface as asyncio.CancelledError from the phase."""
    result, _ = _timed(_workflow(ScriptedWorkflow, {"sleep": 0.01}, agent_sec=deadline))
    _assert_timeout(
        result,
        Phase.WORKFLOW,
        f"workflow did not run: its deadline (agent_timeout_sec = {deadline:g}s)",
    )


def test_a_grader_whose_deadline_already_passed_times_out_and_keeps_the_sample() -> None:
    async def grade() -> ExecutionResult:
        request = make_request({}, grader_sec=0)
        result = await run_workflow_phase(request, ScriptedWorkflow, AgentWorkflowConfig())
        return await run_grader_phase(request, result, ScriptedGrader, GraderConfig())

    result, _ = _timed(grade())
    _assert_timeout(result, Phase.GRADER, "grader did not run: its deadline")
    assert result.sample is not None and result.sample.messages


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_timeout_that_is_not_finite_is_refused_when_the_request_is_made(value: float) -> None:
    with pytest.raises(
        ValueError, match=r"agent_timeout_sec must be finite.*use None for no deadline"
    ):
        make_request(agent_sec=value)
    with pytest.raises(ValueError, match="grader_timeout_sec must be finite"):
        make_request(grader_sec=value)


@pytest.mark.parametrize("value", ["1", True, [1]])
def test_a_timeout_that_is_not_a_number_is_refused_when_the_request_is_made(value: Any) -> None:
    with pytest.raises(TypeError, match="agent_timeout_sec must be a number of seconds or None"):
        make_request(agent_sec=value)
