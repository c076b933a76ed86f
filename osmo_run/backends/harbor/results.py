"""Turn what a Harbor trial left behind into an :class:`ExecutionResult`. Pure functions.

Inputs: Harbor's ``TrialResult`` and osmo-run's own result files from the trial directory
(the workflow runner's and, when our grader ran, the grader runner's). Harbor's exception
names decide the category where our files cannot: timeouts are ``timeout`` (osmosis-ai
reported them as agent errors), a missing or unreadable reward is ``validation_error``,
and an environment that failed to build or start is ``infra_error``, never the agent's.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from harbor.models.trial.result import TimingInfo, TrialResult

from osmo_run.backends.harbor.trial_config import OSMO_GRADES, TASK_GRADES
from osmo_run.sdk.types import ErrorCategory, ExecutionResult, Phase, RolloutSample

_TIMEOUTS: dict[str, tuple[Phase | None, str]] = {
    "AgentTimeoutError": (Phase.WORKFLOW, "the agent phase passed Harbor's deadline"),
    "VerifierTimeoutError": (Phase.GRADER, "the verifier passed Harbor's deadline"),
    "OsmoRunSandboxTimeoutError": (None, ""),
}
_SETUP_INFRA = frozenset(
    {
        "EnvironmentStartTimeoutError",
        "AgentSetupTimeoutError",
        "HealthcheckError",
        "SandboxBuildFailedError",
        "SandboxLikelyOutOfMemoryError",
        "MemoryLimitExceededError",
        "MissingExtraError",
    }
)
_REWARD_INVALID = frozenset(
    {"RewardFileNotFoundError", "RewardFileEmptyError", "VerifierOutputParseError"}
)
_VERIFIER_INFRA = frozenset({"AddTestsDirError", "DownloadVerifierDirError"})


def _seconds(timing: TimingInfo | None) -> float | None:
    if timing is None or timing.started_at is None or timing.finished_at is None:
        return None
    seconds: float = (timing.finished_at - timing.started_at).total_seconds()
    return seconds


def _sum(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _started_by(timing: TimingInfo | None, moment: datetime | None) -> bool:
    """Whether the phase ``timing`` had started by ``moment`` (``None``: at any time)."""
    started = None if timing is None else timing.started_at
    if started is None:
        return False
    try:
        return moment is None or started <= moment
    except TypeError:  # naive against aware: the phase started, order unknown
        return True


def _phase_of_exception(trial: TrialResult) -> Phase:
    """Where Harbor's recorded exception happened: the last phase that had started when it
    occurred. (Harbor still runs the verifier after many agent failures, so "the verifier
    started" alone does not make it the grader's.)"""
    info = trial.exception_info
    occurred = None if info is None else info.occurred_at
    if _started_by(trial.verifier, occurred):
        return Phase.GRADER
    if _started_by(trial.agent_execution, occurred):
        return Phase.WORKFLOW
    return Phase.SETUP


def _from_exception(
    rollout_id: str, trial: TrialResult, sample: RolloutSample | None
) -> ExecutionResult:
    info = trial.exception_info
    assert info is not None
    name = info.exception_type
    text = f"{name}: {info.exception_message}".strip().rstrip(":")
    phase = _phase_of_exception(trial)
    if name == "CancelledError":
        message = "the trial was cancelled"
        return ExecutionResult.failure(rollout_id, ErrorCategory.CANCELLED, message, phase, sample)
    if name in _TIMEOUTS:
        timeout_phase, prefix = _TIMEOUTS[name]
        message = f"{prefix} ({text})" if prefix else info.exception_message
        return ExecutionResult.failure(
            rollout_id, ErrorCategory.TIMEOUT, message, timeout_phase or phase, sample
        )
    if name in _REWARD_INVALID:
        message = (
            f"the verifier left no usable reward ({text}); "
            "its tests/test.sh must write a number to /logs/verifier/reward.txt"
        )
        return ExecutionResult.failure(
            rollout_id, ErrorCategory.VALIDATION_ERROR, message, Phase.GRADER, sample
        )
    if name in _VERIFIER_INFRA:
        return ExecutionResult.failure(
            rollout_id, ErrorCategory.INFRA_ERROR, text, Phase.GRADER, sample
        )
    if name == "OsmoRunSandboxInfraError":  # our agent's own account, in setup or later
        return ExecutionResult.failure(
            rollout_id, ErrorCategory.INFRA_ERROR, info.exception_message, phase, sample
        )
    if name in _SETUP_INFRA or phase is Phase.SETUP:
        message = f"the trial environment failed before the workflow ran: {text}"
        return ExecutionResult.failure(
            rollout_id, ErrorCategory.INFRA_ERROR, message, Phase.SETUP, sample
        )
    if name == "OsmoRunSandboxRunnerError":
        return ExecutionResult.failure(
            rollout_id, ErrorCategory.AGENT_ERROR, info.exception_message, phase, sample
        )
    return ExecutionResult.failure(rollout_id, ErrorCategory.INFRA_ERROR, text, phase, sample)


def _reward_from_verifier(trial: TrialResult) -> float | str | None:
    """The reward Harbor's own verifier reported, ``None`` if none, or a problem string."""
    rewards = trial.verifier_result.rewards if trial.verifier_result else None
    if not rewards:
        return None
    value: Any = rewards.get("reward", next(iter(rewards.values())) if len(rewards) == 1 else None)
    if value is None:
        return f"the verifier reported {sorted(rewards)} but no 'reward' key"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"the verifier's reward {value!r} is not a finite number"
    return float(value)


def trial_to_result(
    rollout_id: str,
    trial: TrialResult,
    workflow_file: dict[str, Any] | None,
    grader_file: dict[str, Any] | None,
    grading: str,
) -> ExecutionResult:
    """The final result of one trial.

    ``grading`` is how the row was to be graded (see :func:`.trial_config.trial_config`):
    our grader in the trial, the task's own tests/test.sh, or the reason it was not graded.
    """
    workflow = ExecutionResult.from_dict(workflow_file) if workflow_file else None
    sample = workflow.sample if workflow else None
    if trial.exception_info is not None:
        if (
            workflow is not None
            and not workflow.ok
            and trial.exception_info.exception_type != "CancelledError"
        ):
            result = workflow  # the runner's own account of the failure is the precise one
        else:
            result = _from_exception(rollout_id, trial, sample)
    elif workflow is None:
        result = ExecutionResult.failure(
            rollout_id,
            ErrorCategory.INTERNAL_ERROR,
            "the trial finished without the workflow runner's result file",
            Phase.WORKFLOW,
        )
    elif not workflow.ok:
        result = workflow
    elif grading == OSMO_GRADES:
        if grader_file is None:
            result = ExecutionResult.failure(
                rollout_id,
                ErrorCategory.INTERNAL_ERROR,
                "the verifier finished without the grader runner's result file",
                Phase.GRADER,
                sample,
            )
        else:
            result = ExecutionResult.from_dict(grader_file)
            result.timings.workflow_sec = workflow.timings.workflow_sec
    elif grading == TASK_GRADES:
        reward = _reward_from_verifier(trial)
        if isinstance(reward, float):
            result = workflow
            result.sample = sample or RolloutSample()
            result.sample.reward = reward
        else:
            message = reward or "the task's verifier reported no reward"
            result = ExecutionResult.failure(
                rollout_id, ErrorCategory.VALIDATION_ERROR, message, Phase.GRADER, sample
            )
    else:
        result = workflow
        result.grader_skipped = grading
    result.rollout_id = rollout_id
    turns = (workflow_file or {}).get("turns")
    if isinstance(turns, list) and result.turns is None:  # llm.capture: tokens in the trial
        result.turns = turns  # the workflow's calls, whichever phase's result is the row's
    result.timings.setup_sec = _sum(_seconds(trial.environment_setup), _seconds(trial.agent_setup))
    if result.timings.workflow_sec is None:
        result.timings.workflow_sec = _seconds(trial.agent_execution)
    verifier_sec = _seconds(trial.verifier)
    if verifier_sec is not None:
        result.timings.grader_sec = verifier_sec
    return result
