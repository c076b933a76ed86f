"""Deadlines of phases run in the caller's task (``LocalBackend.run_rollout``, the runner's
direct path): one sweep keeps them, stalls are charged to the row that caused them, and a
phase ignoring cancellation is handed on as a timeout while its task is left behind."""

from __future__ import annotations

import asyncio
from typing import Any

from osmo_run import (
    AgentWorkflowConfig,
    ConcurrencyConfig,
    ErrorCategory,
    ExecutionResult,
    Phase,
    RolloutStatus,
)
from osmo_run.backends.local import LocalBackend
from osmo_run.sdk.deadlines import CANCEL_GRACE_SEC
from osmo_run.sdk.phase_deadline import PhaseAbandoned
from tests.conftest import make_request
from tests.workflows import ScriptedGrader, ScriptedWorkflow, StubbornGrader, StubbornWorkflow

BLOCK_SEC = 2.5
DEADLINE_SEC = 1.0


def _run_in_place(
    requests: list[Any], workflow: Any = ScriptedWorkflow, grader: Any = None
) -> tuple[dict[str, ExecutionResult], dict[str, ExecutionResult]]:
    """Every request at once through run_rollout, each in a task of its own (as the
    runner's workers are): the results returned and the ones handed on when abandoned."""
    returned: dict[str, ExecutionResult] = {}
    abandoned: dict[str, ExecutionResult] = {}

    async def one(backend: LocalBackend, request: Any) -> None:
        def on_abandon(result: ExecutionResult) -> None:
            abandoned[result.rollout_id] = result

        try:
            returned[request.id] = await backend.run_rollout(request, on_abandon)
        except PhaseAbandoned:
            pass

    async def main() -> None:
        config = AgentWorkflowConfig(ConcurrencyConfig(8))
        backend = LocalBackend(workflow, config, grader=grader)
        try:
            tasks = []
            for request in requests:
                tasks.append(asyncio.create_task(one(backend, request)))
                await asyncio.sleep(0.05)  # the polite rows are waiting when the blocker starts
            done, _ = await asyncio.wait(tasks, timeout=DEADLINE_SEC + CANCEL_GRACE_SEC + 2)
            assert len(done) + len(abandoned) >= len(requests)
        finally:
            StubbornWorkflow.release = True
            await backend.aclose()

    StubbornWorkflow.release = False
    try:
        asyncio.run(main())
    finally:
        StubbornWorkflow.release = False
    return returned, abandoned


def test_in_place_the_blocker_times_out_and_the_rows_it_held_up_succeed() -> None:
    returned, abandoned = _run_in_place(
        [
            make_request({"sleep": 0.3}, agent_sec=DEADLINE_SEC, row_id="polite"),
            make_request({"sleep": 0.05}, agent_sec=DEADLINE_SEC, row_id="quick"),
            make_request({"block": BLOCK_SEC}, agent_sec=DEADLINE_SEC, row_id="blocker"),
        ]
    )
    assert not abandoned
    blocker = returned["blocker"]
    assert (blocker.error_category, blocker.error_phase) == (ErrorCategory.TIMEOUT, Phase.WORKFLOW)
    assert "--isolation process" in (blocker.error_message or "")
    for row in ("polite", "quick"):
        assert returned[row].status is RolloutStatus.SUCCESS, returned[row].error_message


def test_in_place_an_awaiting_row_past_its_deadline_is_cancelled_at_it() -> None:
    returned, abandoned = _run_in_place(
        [make_request({"sleep": 30}, agent_sec=0.2, row_id="slow")], grader=ScriptedGrader
    )
    slow = returned["slow"]
    assert not abandoned
    assert slow.error_message == "workflow exceeded its 0.2s deadline (agent_timeout_sec)"
    assert slow.timings.workflow_sec is not None and slow.timings.workflow_sec < 1.0


def test_in_place_a_stubborn_grader_is_abandoned_and_keeps_the_workflows_sample() -> None:
    request = make_request({}, agent_sec=5, grader_sec=0.2, row_id="graded")
    returned, abandoned = _run_in_place([request], workflow=ScriptedWorkflow, grader=StubbornGrader)
    assert "graded" not in returned
    result = abandoned["graded"]
    assert (result.error_category, result.error_phase) == (ErrorCategory.TIMEOUT, Phase.GRADER)
    assert result.error_message == (
        "grader exceeded its 0.2s deadline (grader_timeout_sec) and ignored cancellation; "
        f"abandoned after {CANCEL_GRACE_SEC:g}s"
    )
    assert result.sample is not None and result.sample.messages
    assert result.reward is None
