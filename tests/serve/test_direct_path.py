"""A served rollout runs as ``osmo-run local`` runs a row (the runner's direct path, its
phases in the worker): a workflow that ignores its deadline's cancellation still ends as a
timeout at its deadline, and the server goes on serving."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.serve.harness import serving
from tests.workflows import StubbornWorkflow


@pytest.mark.usefixtures("stubborn_released")
def test_a_workflow_ignoring_its_deadline_times_out_and_the_server_goes_on(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[dict[str, object], dict[str, object], float]:
        async with serving(
            tmp_path, workflow=StubbornWorkflow, grader=None, concurrency=1, lease_sec=60
        ) as server:
            stuck = await server.admitted(
                "stuck", agent_timeout_sec=0.5, metadata={"stubborn_sec": 30}
            )
            started = time.monotonic()
            stuck_answer = await server.final("stuck", stuck, within=20)
            took = time.monotonic() - started
            after = await server.admitted("after", metadata={"stubborn_sec": 0.1})
            after_answer = await server.final("after", after, within=20)
            StubbornWorkflow.release = True  # the abandoned one ends: the server stops at once
        return stuck_answer, after_answer, took

    stuck, after, took = asyncio.run(scenario())
    assert (stuck["status"], stuck["err_category"]) == ("failure", "timeout")
    assert took < 15  # its deadline and the cancel grace, not the workflow's 30 s
    assert after["status"] == "success"
