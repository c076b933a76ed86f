"""``osmo_run.testing``: what authors test their workflows and graders with, and the fake
backend runner tests use."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from osmo_run import ErrorCategory, ExecutionRequest, ExecutionResult, Phase, RolloutStatus
from osmo_run.backends.base import ExecutionBackend
from osmo_run.run.executing.display import NullDisplay
from osmo_run.run.executing.runner import Runner, work_items
from osmo_run.run.reading.dataset import Dataset
from osmo_run.run.writing.output import OutputWriter
from osmo_run.testing import FakeBackend, run_grader, run_rollout, run_workflow
from tests.conftest import jsonl_bytes
from tests.workflows import ScriptedGrader, ScriptedWorkflow


def test_run_workflow_returns_the_sample_a_run_would_record() -> None:
    result = asyncio.run(run_workflow(ScriptedWorkflow, "hello", metadata={"returns": "output"}))
    assert result.status is RolloutStatus.SUCCESS
    assert result.sample is not None
    assert result.sample.messages[-1] == {"role": "assistant", "content": "hello"}
    assert result.sample.metrics == {"turns": 1}


def test_run_workflow_reports_a_failure_as_a_result_with_its_category() -> None:
    result = asyncio.run(run_workflow(ScriptedWorkflow, "hi", metadata={"raise": "KeyError"}))
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.AGENT_ERROR
    assert result.error_phase is Phase.WORKFLOW
    assert result.error_message is not None and result.error_message.startswith("KeyError")


def test_run_workflow_holds_the_deadline() -> None:
    started = time.monotonic()
    result = asyncio.run(
        run_workflow(ScriptedWorkflow, "hi", metadata={"sleep": 30}, timeout_sec=0.2)
    )
    assert result.error_category is ErrorCategory.TIMEOUT
    assert time.monotonic() - started < 20  # cancelled at its deadline, not after the sleep


def test_run_grader_scores_a_message_list_against_the_label() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hi"}]
    right = asyncio.run(run_grader(ScriptedGrader, messages, "hi"))
    wrong = asyncio.run(run_grader(ScriptedGrader, messages, "bye"))
    assert (right.status, right.reward) == (RolloutStatus.SUCCESS, 1.0)
    assert (wrong.status, wrong.reward) == (RolloutStatus.SUCCESS, 0.0)


def test_run_rollout_grades_only_when_there_is_a_label() -> None:
    graded = asyncio.run(run_rollout(ScriptedWorkflow, "hi", label="hi", grader=ScriptedGrader))
    unlabeled = asyncio.run(run_rollout(ScriptedWorkflow, "hi", grader=ScriptedGrader))
    assert graded.reward == 1.0
    assert unlabeled.reward is None
    assert unlabeled.grader_skipped == "row has no label"


def _drive(backend: ExecutionBackend, tmp_path: Path, rows: int) -> list[str]:
    data = tmp_path / "data.jsonl"
    data.write_bytes(jsonl_bytes([{"id": f"r{i}", "prompt": "hi"} for i in range(rows)]))

    async def main() -> list[str]:
        with OutputWriter(tmp_path / "out.jsonl") as writer:
            summary = await Runner(backend, writer, NullDisplay()).run(
                work_items(Dataset(data).rows())
            )
        return [str(summary.total), *summary.by_status]

    return asyncio.run(main())


def test_fake_backend_answers_from_its_function_within_its_concurrency(tmp_path: Path) -> None:
    async def slow(request: ExecutionRequest) -> ExecutionResult:
        await asyncio.sleep(0.05)
        return ExecutionResult(request.id, RolloutStatus.SUCCESS)

    backend = FakeBackend(slow, max_concurrency=3)
    assert _drive(backend, tmp_path, 10) == ["10", "success"]
    assert sorted(r.id for r in backend.requests) == sorted(f"r{i}" for i in range(10))
    assert backend.peak_in_flight == 3


def test_the_public_api_is_pinned() -> None:
    """What ``osmo_run.testing`` promises users: a name leaves only on purpose."""
    import osmo_run.testing

    assert osmo_run.testing.__all__ == [
        "FakeBackend",
        "MockCall",
        "MockError",
        "MockModel",
        "MockReply",
        "MockToolCall",
        "make_request",
        "run_grader",
        "run_grader_sync",
        "run_rollout",
        "run_rollout_sync",
        "run_workflow",
        "run_workflow_sync",
    ]
    for name in osmo_run.testing.__all__:
        assert getattr(osmo_run.testing, name).__doc__, f"{name} has no docstring"
