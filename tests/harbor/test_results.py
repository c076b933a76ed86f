"""``trial_to_result``: what a finished Harbor trial becomes in the output (no Docker).

Trials are Harbor ``TrialResult`` objects built the way Harbor records them: the exception
it caught, with the moment it occurred, and the phases that had started by then. One is a
``result.json`` saved from a real trial (``fixtures/blocked-workflow.result.json``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from harbor.models.task.id import LocalTaskId  # noqa: E402
from harbor.models.trial.config import TaskConfig, TrialConfig  # noqa: E402
from harbor.models.trial.result import AgentInfo, ExceptionInfo, TimingInfo, TrialResult  # noqa: E402
from harbor.models.verifier.result import VerifierResult  # noqa: E402

from osmo_run.backends.harbor.results import trial_to_result  # noqa: E402
from osmo_run.sdk.types import ErrorCategory, Phase, RolloutStatus  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")


def trial(
    exception: str | None = None,
    message: str = "",
    reached: str | None = "verifier",
    failed_in: str | None = None,
    rewards: dict[str, float] | None = None,
) -> TrialResult:
    """A trial whose phases ran one second each, a second apart, up to and including
    ``reached``; Harbor recorded ``exception`` as ``failed_in`` (default: ``reached``)
    ended."""
    task = Path("/tasks/calculator")
    phases: dict[str, Any] = {}
    if reached is not None:
        for i, name in enumerate(PHASES[: PHASES.index(reached) + 1]):
            start = T0 + timedelta(seconds=2 * i)
            phases[name] = TimingInfo(started_at=start, finished_at=start + timedelta(seconds=1))
    info = None
    if exception is not None:
        phase = failed_in or reached
        when = T0 if phase is None else phases[phase].finished_at
        info = ExceptionInfo(
            exception_type=exception,
            exception_message=message,
            exception_traceback="Traceback ...",
            occurred_at=when,
        )
    return TrialResult(
        task_name="osmo-run/calculator",
        trial_name="osmo-test-00001-row",
        trial_uri="file:///trials/osmo-test-00001-row",
        task_id=LocalTaskId(path=task),
        task_checksum="0" * 64,
        config=TrialConfig(task=TaskConfig(path=task)),
        agent_info=AgentInfo(name="osmo-run", version="0.1.0"),
        verifier_result=VerifierResult(rewards=rewards),
        exception_info=info,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=10),
        **phases,
    )


def workflow_file(status: str = "success", **extra: Any) -> dict[str, Any]:
    """What the in-sandbox workflow runner writes (``agent/osmo_result.json``)."""
    return {
        "rollout_id": "row",
        "status": status,
        "sample": {"messages": [{"role": "assistant", "content": "42"}], "metrics": {}},
        "workflow_sec": 0.1,
        **extra,
    }


def test_agent_timeout_is_a_workflow_timeout_even_though_the_verifier_ran_after() -> None:
    # Harbor grades after an AgentTimeoutError, so the verifier phase started later.
    result = trial_to_result(
        "row",
        trial(
            "AgentTimeoutError",
            "Agent execution timed out after 33.0 seconds",
            failed_in="agent_execution",
        ),
        None,
        None,
        "osmo",
    )
    assert (result.status, result.error_category, result.error_phase) == (
        RolloutStatus.FAILURE,
        ErrorCategory.TIMEOUT,
        Phase.WORKFLOW,
    )
    assert "AgentTimeoutError" in (result.error_message or "")


def test_verifier_timeout_is_a_grader_timeout_that_keeps_the_sample() -> None:
    result = trial_to_result(
        "row", trial("VerifierTimeoutError", "timed out"), workflow_file(), None, "task"
    )
    assert (result.error_category, result.error_phase) == (ErrorCategory.TIMEOUT, Phase.GRADER)
    assert result.sample is not None and result.sample.messages[-1]["content"] == "42"


def test_missing_reward_file_is_a_grader_validation_error_naming_reward_txt() -> None:
    result = trial_to_result(
        "row",
        trial("RewardFileNotFoundError", "No reward file found at /x/verifier/reward.txt"),
        workflow_file(),
        None,
        "task",
    )
    assert (result.error_category, result.error_phase) == (
        ErrorCategory.VALIDATION_ERROR,
        Phase.GRADER,
    )
    assert "/logs/verifier/reward.txt" in (result.error_message or "")


@pytest.mark.parametrize(
    ("exception", "reached"),
    [
        ("EnvironmentStartTimeoutError", "environment_setup"),
        ("RuntimeError", "environment_setup"),  # compose up failed: no image, dead daemon
        ("RuntimeError", None),
        ("AgentSetupTimeoutError", "agent_setup"),
    ],
)
def test_failures_before_the_agent_started_are_setup_infra_errors(
    exception: str, reached: str | None
) -> None:
    result = trial_to_result("row", trial(exception, "boom", reached=reached), None, None, "osmo")
    assert (result.status, result.error_category, result.error_phase) == (
        RolloutStatus.FAILURE,
        ErrorCategory.INFRA_ERROR,
        Phase.SETUP,
    )
    assert exception in (result.error_message or "")


@pytest.mark.parametrize("reached", ["environment_setup", "agent_execution", "verifier"])
def test_cancelled_trial_is_cancelled_in_any_phase(reached: str) -> None:
    result = trial_to_result("row", trial("CancelledError", reached=reached), None, None, "osmo")
    assert (result.status, result.error_category) == (
        RolloutStatus.CANCELLED,
        ErrorCategory.CANCELLED,
    )


def test_cancelled_trial_wins_over_a_failed_workflow_file() -> None:
    result = trial_to_result(
        "row",
        trial("CancelledError", reached="agent_execution"),
        workflow_file("failure", error_category="agent_error", error_phase="workflow"),
        None,
        "osmo",
    )
    assert result.status is RolloutStatus.CANCELLED


def test_sandbox_infra_error_in_agent_setup_is_setup_infra() -> None:
    message = "the trial image needs python3 >= 3.11 and coreutils' `timeout`"
    result = trial_to_result(
        "row",
        trial("OsmoRunSandboxInfraError", message, reached="agent_setup"),
        None,
        None,
        "osmo",
    )
    assert (result.error_category, result.error_phase) == (
        ErrorCategory.INFRA_ERROR,
        Phase.SETUP,
    )
    assert result.error_message == message


def test_sandbox_infra_error_while_the_workflow_ran_is_infra_in_the_workflow_phase() -> None:
    message = "the workflow runner was killed (exit 137: ...)"
    result = trial_to_result(
        "row",
        trial("OsmoRunSandboxInfraError", message, failed_in="agent_execution"),
        None,
        None,
        "osmo",
    )
    assert (result.error_category, result.error_phase) == (
        ErrorCategory.INFRA_ERROR,
        Phase.WORKFLOW,
    )
    assert result.error_message == message


def test_blocked_workflow_from_a_real_trial_is_a_workflow_timeout() -> None:
    """A real result.json: the runner was killed at its hard deadline
    (OsmoRunSandboxTimeoutError), then Harbor still ran the verifier."""
    text = (FIXTURES / "blocked-workflow.result.json").read_text(encoding="utf-8")
    real = TrialResult.model_validate_json(text)
    assert real.verifier is not None and real.verifier.started_at is not None
    result = trial_to_result("block", real, None, None, "osmo")
    assert (result.error_category, result.error_phase) == (ErrorCategory.TIMEOUT, Phase.WORKFLOW)
    assert "hard deadline" in (result.error_message or "")


def test_task_reward_from_reward_txt_is_the_rows_reward() -> None:
    result = trial_to_result("row", trial(rewards={"reward": 1.0}), workflow_file(), None, "task")
    assert result.status is RolloutStatus.SUCCESS
    assert result.reward == 1.0


def test_failed_workflow_file_is_the_rows_account_of_its_failure() -> None:
    failed = workflow_file(
        "failure",
        error_category="agent_error",
        error_phase="workflow",
        error_message="RuntimeError: no (at w.py:1 in run)",
    )
    result = trial_to_result("row", trial(), failed, None, "osmo")
    assert (result.error_category, result.error_phase, result.error_message) == (
        ErrorCategory.AGENT_ERROR,
        Phase.WORKFLOW,
        "RuntimeError: no (at w.py:1 in run)",
    )


TURN = {
    "model": "m",
    "finish_reason": "stop",
    "prompt_token_ids": [1, 2],
    "completion_token_ids": [3],
}


@pytest.mark.parametrize(
    ("grading", "grader"),
    [
        ("osmo", {"rollout_id": "row", "status": "success", "sample": {"reward": 1.0}}),
        ("none", None),
    ],
)
def test_the_calls_a_trial_captured_come_back_with_its_result(
    grading: str, grader: dict[str, Any] | None
) -> None:
    """llm.capture: tokens in a trial: the workflow runner writes the calls it captured into
    its result file, and the row's result carries them to the run's turns file, whichever
    phase's result is the row's (the grader's holds none)."""
    result = trial_to_result("row", trial(), workflow_file(turns=[TURN, TURN]), grader, grading)
    assert result.turns == [TURN, TURN]
    failed = workflow_file("failure", error_category="agent_error", turns=[TURN])
    assert trial_to_result("row", trial(), failed, None, "osmo").turns == [TURN], "kept on failure"
    assert trial_to_result("row", trial(), workflow_file(), None, "none").turns is None


def _warned_workflow_file() -> dict[str, Any]:
    """A successful workflow's result file with a warning, info and model usage."""
    usage = {"model_calls": 1, "prompt_tokens": 10, "completion_tokens": 2}
    return workflow_file(warnings=["metric 'score' dropped"], info={"k": 1}, usage=usage)


@pytest.mark.parametrize(
    ("exception", "grading", "category"),
    [
        ("VerifierTimeoutError", "osmo", ErrorCategory.TIMEOUT),
        ("RewardFileNotFoundError", "task", ErrorCategory.VALIDATION_ERROR),
        ("CancelledError", "osmo", ErrorCategory.CANCELLED),
    ],
)
def test_a_grader_phase_failure_harbor_recorded_keeps_the_workflows_outcome(
    exception: str, grading: str, category: ErrorCategory
) -> None:
    """Combined like every backend's grader failure: the row fails in the grader phase
    and keeps what its workflow reported (its warning, info and model usage), as a
    grader timeout does in process."""
    result = trial_to_result("row", trial(exception, "x"), _warned_workflow_file(), None, grading)
    assert (result.error_category, result.error_phase) == (category, Phase.GRADER)
    assert result.warnings == ["metric 'score' dropped"]
    assert result.info == {"k": 1}
    assert result.usage is not None and result.usage.prompt_tokens == 10
    assert result.sample is not None and result.sample.messages[-1]["content"] == "42"
    assert result.reward is None


def test_a_grader_that_could_not_load_in_the_trial_keeps_the_workflows_sample() -> None:
    """The grader runner's load failure has no sample or info of its own: the row keeps
    the workflow's, and the workflow's warning once, whatever the grader file repeats."""
    load_failure = {
        "rollout_id": "row",
        "status": "failure",
        "error_category": "agent_error",
        "error_phase": "grader",
        "error_message": "the grader could not be loaded inside the trial environment: ...",
        "warnings": ["metric 'score' dropped", "the grader's own"],
    }
    result = trial_to_result("row", trial(), _warned_workflow_file(), load_failure, "osmo")
    assert (result.error_category, result.error_phase) == (ErrorCategory.AGENT_ERROR, Phase.GRADER)
    assert result.sample is not None and result.sample.messages[-1]["content"] == "42"
    assert result.warnings == ["metric 'score' dropped", "the grader's own"]
    assert result.info == {"k": 1}
    assert result.usage is not None and result.usage.completion_tokens == 2
