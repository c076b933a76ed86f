"""Turn what a Harbor trial left behind into an :class:`ExecutionResult`. Pure functions.

Inputs: Harbor's ``TrialResult`` and osmo-run's own result files from the trial directory
(the workflow runner's and, when our grader ran, the grader runner's). They are read as
the workflow phase's outcome and the grader phase's, and combined by the one function
every backend uses (:func:`~osmo_run.sdk.rollout.combine_phases`). Harbor's exception
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
from osmo_run.sdk.rollout import combine_phases, copy_result
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


def _exception_outcome(trial: TrialResult) -> tuple[ErrorCategory, str, Phase]:
    """The category, message and phase of the failure Harbor recorded for ``trial``."""
    info = trial.exception_info
    assert info is not None
    name = info.exception_type
    text = f"{name}: {info.exception_message}".strip().rstrip(":")
    phase = _phase_of_exception(trial)
    if name == "CancelledError":
        return ErrorCategory.CANCELLED, "the trial was cancelled", phase
    if name in _TIMEOUTS:
        timeout_phase, prefix = _TIMEOUTS[name]
        message = f"{prefix} ({text})" if prefix else info.exception_message
        return ErrorCategory.TIMEOUT, message, timeout_phase or phase
    if name in _REWARD_INVALID:
        message = (
            f"the verifier left no usable reward ({text}); "
            "its tests/test.sh must write a number to /logs/verifier/reward.txt"
        )
        return ErrorCategory.VALIDATION_ERROR, message, Phase.GRADER
    if name in _VERIFIER_INFRA:
        return ErrorCategory.INFRA_ERROR, text, Phase.GRADER
    if name == "OsmoRunSandboxInfraError":  # our agent's own account, in setup or later
        return ErrorCategory.INFRA_ERROR, info.exception_message, phase
    if name in _SETUP_INFRA or phase is Phase.SETUP:
        message = f"the trial environment failed before the workflow ran: {text}"
        return ErrorCategory.INFRA_ERROR, message, Phase.SETUP
    if name == "OsmoRunSandboxRunnerError":
        return ErrorCategory.AGENT_ERROR, info.exception_message, phase
    return ErrorCategory.INFRA_ERROR, text, phase


def _failed_grading(
    workflow: ExecutionResult, category: ErrorCategory, message: str
) -> ExecutionResult:
    """The grader phase's result when it failed outside the grader runner (Harbor's
    verifier, a missing file): the workflow's result failed in the grader phase, as the
    grader phase itself makes one (:func:`~osmo_run.sdk.rollout.run_grader_phase`)."""
    graded = copy_result(workflow)
    graded.fail(category, message, Phase.GRADER)
    if graded.sample is not None:
        graded.sample.reward = None
    return graded


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
    """The final result of one trial: the workflow phase's outcome and the grader
    phase's, read from what the trial left, combined by
    :func:`~osmo_run.sdk.rollout.combine_phases` as on every backend; Harbor's timings
    of the trial's phases added.

    ``grading`` is how the row was to be graded (see :func:`.trial_config.trial_config`):
    our grader in the trial, the task's own tests/test.sh, or the reason it was not graded.
    """
    workflow = ExecutionResult.from_dict(workflow_file) if workflow_file else None
    turns = (workflow_file or {}).get("turns")
    if workflow is not None and isinstance(turns, list):  # llm.capture: tokens in the trial
        workflow.turns = turns
    info = trial.exception_info
    if info is not None and (
        workflow is None or workflow.ok or info.exception_type == "CancelledError"
    ):  # a failed workflow's own account of its failure is the precise one
        category, message, phase = _exception_outcome(trial)
        if workflow is not None and workflow.ok and phase is Phase.GRADER:
            result = combine_phases(workflow, _failed_grading(workflow, category, message))
        else:
            sample = workflow.sample if workflow else None
            failed = ExecutionResult.failure(rollout_id, category, message, phase, sample)
            failed.turns = workflow.turns if workflow else None
            result = combine_phases(failed, None)
    elif workflow is None:
        missing = ExecutionResult.failure(
            rollout_id,
            ErrorCategory.INTERNAL_ERROR,
            "the trial finished without the workflow runner's result file",
            Phase.WORKFLOW,
        )
        result = combine_phases(missing, None)
    elif not workflow.ok:
        result = combine_phases(workflow, None)
    else:
        graded, skipped = _grader_outcome(trial, workflow, grader_file, grading)
        result = combine_phases(workflow, graded, skipped)
    result.rollout_id = rollout_id
    result.timings.setup_sec = _sum(_seconds(trial.environment_setup), _seconds(trial.agent_setup))
    if result.timings.workflow_sec is None:
        result.timings.workflow_sec = _seconds(trial.agent_execution)
    verifier_sec = _seconds(trial.verifier)
    if verifier_sec is not None:
        result.timings.grader_sec = verifier_sec
    return result


def _grader_outcome(
    trial: TrialResult,
    workflow: ExecutionResult,
    grader_file: dict[str, Any] | None,
    grading: str,
) -> tuple[ExecutionResult | None, str | None]:
    """The grader phase's result of a trial whose workflow succeeded and Harbor recorded
    no failure, or ``None`` and why the row was not graded."""
    if grading == OSMO_GRADES:
        if grader_file is None:
            message = "the verifier finished without the grader runner's result file"
            return _failed_grading(workflow, ErrorCategory.INTERNAL_ERROR, message), None
        return ExecutionResult.from_dict(grader_file), None
    if grading == TASK_GRADES:
        reward = _reward_from_verifier(trial)
        if not isinstance(reward, float):
            message = reward or "the task's verifier reported no reward"
            return _failed_grading(workflow, ErrorCategory.VALIDATION_ERROR, message), None
        graded = copy_result(workflow)
        graded.sample = graded.sample or RolloutSample()
        graded.sample.reward = reward
        return graded, None
    return None, grading
