"""One result path for every local mode: the workflow's and the grader's outcomes are
combined once, by one pure function, and nothing is written twice."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from osmo_run import ExecutionResult
from osmo_run.backends.local import LocalBackend
from osmo_run.sdk.rollout import combine_phases
from osmo_run.sdk.types import ErrorCategory, LLMUsage, Phase, RolloutSample, RolloutStatus
from tests.conftest import REPO, make_request


def _graded(isolation: str, tmp_path: Path) -> ExecutionResult:
    results: list[ExecutionResult] = []

    async def main() -> None:
        backend = LocalBackend(
            "tests.workflows:ScriptedWorkflow",
            grader="tests.workflows:ScriptedGrader",
            isolation=isolation,
            code_dir=REPO,
            artifacts_root=tmp_path,
        )
        try:
            request = make_request({"returns": "nan_info"}, label="hi")
            await backend.execute(request, results.append)
        finally:
            await backend.aclose()

    asyncio.run(main())
    assert len(results) == 1
    return results[0]


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_workflow_warning_is_written_once_when_a_grader_runs(
    isolation: str, tmp_path: Path
) -> None:
    result = _graded(isolation, tmp_path)
    assert result.ok, result.error_message
    assert result.reward == 1.0
    dropped = [w for w in result.warnings if "score" in w]
    assert len(dropped) == 1, result.warnings


def test_combining_phases_changes_neither_outcome() -> None:
    sample = RolloutSample([{"role": "assistant", "content": "hi"}])
    workflow = ExecutionResult("r1", RolloutStatus.SUCCESS, sample=sample, warnings=["w"])
    workflow.timings.workflow_sec = 1.5
    graded = ExecutionResult(
        "r1", RolloutStatus.SUCCESS, sample=RolloutSample(sample.messages, reward=1.0)
    )
    graded.warnings = ["w", "g"]
    graded.timings.grader_sec = 0.5
    final = combine_phases(workflow, graded)
    assert final.warnings == ["w", "g"]
    assert (final.timings.workflow_sec, final.timings.grader_sec) == (1.5, 0.5)
    assert final.reward == 1.0
    assert workflow.warnings == ["w"] and graded.warnings == ["w", "g"]
    assert workflow.sample is sample and sample.reward is None
    assert final is not workflow and final is not graded


def test_a_grader_runner_that_failed_before_grading_keeps_the_workflows_outcome() -> None:
    """A grader process (or trial) that could not load its grader hands back a bare
    failure: the row keeps the workflow's conversation, warnings, info and usage."""
    sample = RolloutSample([{"role": "assistant", "content": "hi"}])
    workflow = ExecutionResult(
        "r1", RolloutStatus.SUCCESS, sample=sample, info={"k": 1}, warnings=["w"]
    )
    workflow.usage = LLMUsage(1, 10, 2)
    bare = ExecutionResult.failure(
        "r1", ErrorCategory.AGENT_ERROR, "the grader could not be loaded", Phase.GRADER
    )
    final = combine_phases(workflow, bare)
    assert (final.status, final.error_phase) == (RolloutStatus.FAILURE, Phase.GRADER)
    assert final.sample is sample and final.reward is None
    assert (final.info, final.warnings, final.usage) == ({"k": 1}, ["w"], workflow.usage)
