"""Run one rollout's workflow phase and grader phase, with deadlines and error categories.

Shared by :class:`~osmo_run.backends.local.LocalBackend` (in process) and the sandbox
runner (inside a Harbor trial or a child process, one phase per process), so every backend
classifies the same failure the same way. Stdlib only.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.context import (
    GRADER_INFO_KEY,
    AgentWorkflowContext,
    GraderContext,
    LLMEndpoint,
    RolloutContext,
    _current,
)
from osmo_run.sdk.deadlines import CANCEL_GRACE_SEC
from osmo_run.sdk.exits import exits_as_errors
from osmo_run.sdk.phase_deadline import PhaseDeadline
from osmo_run.sdk.samples import sample_from_output, sample_from_source
from osmo_run.sdk.stalls import LoopStallMonitor, owner_task_name, rollout_owner
from osmo_run.sdk.telemetry import fit_info, fit_metrics
from osmo_run.sdk.types import (
    SAMPLE_REMOVED,
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    Phase,
    RolloutSample,
    RolloutStatus,
    categorize_exception,
    describe_exception,
    validate_reward,
)
from osmo_run.sdk.workflow import AgentWorkflow, Grader

__all__ = [
    "CANCEL_GRACE_SEC",
    "GraderSource",
    "WorkflowSource",
    "categorize_exception",
    "describe_exception",
    "grader_skip_reason",
    "make_grader",
    "make_workflow",
    "run_grader_phase",
    "run_to_completion",
    "run_workflow_phase",
    "start_task",
]

T = TypeVar("T")

WorkflowSource = type[AgentWorkflow] | AgentWorkflow
GraderSource = type[Grader] | Grader


DeadlineArgs = tuple[str, str, float | None, float, str, LoopStallMonitor | None]
"""A phase's :class:`PhaseDeadline`, unbuilt: most phases end at once and never need it
(building one costs more than the rest of a no-op phase's bookkeeping)."""


class _DeadlineExceeded(Exception):
    def __init__(self, abandoned: bool, deadline: PhaseDeadline) -> None:
        super().__init__()
        self.abandoned = abandoned
        self.deadline = deadline


def _swallow_result(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # marks it retrieved: an abandoned task must not warn at exit


def start_task(
    coro: Coroutine[Any, Any, T],
    context: contextvars.Context | None = None,
    owner: str | None = None,
) -> asyncio.Task[T]:
    """A task for ``coro`` that, on Python >= 3.12, runs its first step right away: a
    coroutine that finishes without waiting costs no trip through the event loop.

    ``owner`` (a rollout id) names the task on Python 3.11, where the stall monitor cannot
    read a task's context (see :mod:`osmo_run.sdk.stalls`).
    """
    loop = asyncio.get_running_loop()
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, context=context, eager_start=True)
    name = None if owner is None else owner_task_name(owner)
    return loop.create_task(coro, context=context, name=name)


def _outcome(task: asyncio.Task[T]) -> T:
    """The finished ``task``'s result. A ``CancelledError`` here came from inside: the
    deadline's cancellation is handled before, the caller's never reaches this point."""
    try:
        return task.result()
    except asyncio.CancelledError:
        raise RuntimeError(
            "asyncio.CancelledError was raised inside the rollout's own code"
        ) from None


async def _wait(task: asyncio.Task[Any], deadline: PhaseDeadline) -> None:
    """Until ``task`` is done or its deadline has passed; cancelling the caller cancels it."""
    try:
        if deadline.timeout_sec is None:
            await asyncio.wait((task,))
            return
        while not task.done() and (remaining := deadline.remaining()) > 0:
            await asyncio.wait((task,), timeout=remaining)
    except asyncio.CancelledError:
        task.cancel()
        raise


async def _await_with_deadline(
    coro: Coroutine[Any, Any, Any], clock: DeadlineArgs, context: contextvars.Context
) -> Any:
    """Await ``coro`` in its own task (in ``context``); raise ``_DeadlineExceeded`` once the
    deadline passes.

    A coroutine that swallows cancellation is abandoned after ``CANCEL_GRACE_SEC`` so the
    deadline holds. Cancelling the caller cancels the task.
    """
    task = start_task(coro, context, clock[4])
    if task.done():  # it finished without waiting: no timer
        try:
            return task.result()
        except asyncio.CancelledError:
            return _outcome(task)  # raised inside: _outcome says so
    deadline = PhaseDeadline(*clock)
    await _wait(task, deadline)
    if task.done():
        return _outcome(task)
    task.cancel()
    done, _ = await asyncio.wait((task,), timeout=CANCEL_GRACE_SEC)
    if not done:
        task.add_done_callback(_swallow_result)
    elif not task.cancelled():
        _swallow_result(task)
    raise _DeadlineExceeded(not done, deadline)


def make_workflow(source: WorkflowSource, config: AgentWorkflowConfig) -> AgentWorkflow:
    """A fresh workflow (with its own copy of ``config``) from a class; an instance as is."""
    if isinstance(source, AgentWorkflow):
        return source
    return source(config.fresh_copy())


def make_grader(source: GraderSource, config: GraderConfig) -> Grader:
    """A fresh grader (with its own copy of ``config``) from a class; an instance as is."""
    if isinstance(source, Grader):
        return source
    return source(config.fresh_copy())


async def run_workflow_phase(
    request: ExecutionRequest,
    workflow: WorkflowSource,
    config: AgentWorkflowConfig,
    llm: LLMEndpoint | None = None,
    artifacts_root: Path | None = None,
    *,
    stalls: LoopStallMonitor | None = None,
) -> ExecutionResult:
    """Run the workflow for ``request`` under its agent deadline; never raises but for
    cancellation of the caller.

    Returns a SUCCESS result with the sample, or a FAILURE with category, message and
    phase. ``timings.workflow_sec``, ``usage`` (the model calls the workflow made) and
    ``warnings`` are set either way. ``stalls`` watches the loop this phase shares with
    other rows: their stalls extend its deadline, its own count against it.
    """
    started = time.monotonic()
    timeout_sec = request.agent_timeout_sec
    deadline = None if timeout_sec is None else started + timeout_sec  # per-call retries' bound
    rollout = RolloutContext(rollout_id=request.id, llm=llm, deadline=deadline)
    context = contextvars.copy_context()
    context.run(_current.set, rollout)  # also how the stall monitor knows the task's row
    clock = (
        "workflow",
        "agent_timeout_sec",
        request.agent_timeout_sec,
        started,
        request.id,
        stalls,
    )
    try:
        if request.agent_timeout_sec is not None and request.agent_timeout_sec <= 0:
            message = PhaseDeadline(*clock).passed_message()
            result = ExecutionResult.failure(
                request.id, ErrorCategory.TIMEOUT, message, Phase.WORKFLOW
            )
        else:
            instance = make_workflow(workflow, config)
            ctx = AgentWorkflowContext(
                prompt=request.prompt,
                config=instance.config,
                metadata=request.metadata,
                rollout_id=request.id,
                _artifacts_root=artifacts_root,
                _artifacts_name=request.safe_name,
                _warnings=rollout.warnings,
            )
            output = await _await_with_deadline(
                exits_as_errors(instance.run(ctx), "workflow"), clock, context
            )
            sample, info = sample_from_output(output)
            if sample is None:  # the sample source's, under the same deadline
                source = sample_from_source(rollout, output)
                sample = await _await_with_deadline(source, clock, context)
            result = _workflow_result(request, clock, sample, info)
    except _DeadlineExceeded as exc:
        if rollout.retrying is not None:  # waiting out a rate limit: the row fails with it
            result = ExecutionResult.from_exception(request.id, rollout.retrying, Phase.WORKFLOW)
        else:
            message = exc.deadline.expired_message(exc.abandoned)
            result = ExecutionResult.failure(
                request.id, ErrorCategory.TIMEOUT, message, Phase.WORKFLOW
            )
    except Exception as exc:
        result = ExecutionResult.from_exception(request.id, exc, Phase.WORKFLOW)
    result.timings.workflow_sec = time.monotonic() - started
    if rollout.warnings:
        result.warnings.extend(rollout.warnings)
    usage = rollout.usage  # copied: an abandoned workflow may still be counting
    if usage.model_calls or usage.retried_calls:  # retried calls show even when none answered
        result.usage = dataclasses.replace(usage)
    return result


def _workflow_result(
    request: ExecutionRequest,
    clock: DeadlineArgs,
    sample: RolloutSample,
    info: dict[str, Any],
) -> ExecutionResult:
    """The result of a workflow that returned: a timeout when it returned late, else the
    sample with its telemetry made writable."""
    timeout = clock[2]  # the wall clock first: only past it can the phase have overrun
    deadline = None
    if timeout is not None and time.monotonic() - clock[3] > timeout:
        deadline = PhaseDeadline(*clock)
    if deadline is not None and deadline.overrun():
        message = deadline.late_message()
        return ExecutionResult.failure(request.id, ErrorCategory.TIMEOUT, message, Phase.WORKFLOW)
    result = ExecutionResult(request.id, RolloutStatus.SUCCESS, sample=sample)
    if info:
        result.info, info_warning = fit_info(info)
        if info_warning is not None:
            result.warnings.append(info_warning)
    if type(sample.metrics) is not dict or sample.metrics:
        _fit_sample_metrics(result)
    if deadline is not None:
        _note_extension(result.warnings, deadline)
    return result


def _note_extension(warnings: list[str], deadline: PhaseDeadline) -> None:
    extension = deadline.extension_warning()
    if extension is not None:
        warnings.append(extension)


def _fit_sample_metrics(result: ExecutionResult) -> None:
    sample = result.sample
    if sample is None:
        return
    sample.metrics, warning = fit_metrics(sample.metrics)
    if warning is not None and warning not in result.warnings:
        result.warnings.append(warning)


def grader_skip_reason(
    request: ExecutionRequest,
    has_grader: bool,
    *,
    grade_without_label: bool = False,
    sample: RolloutSample | None = None,
) -> str | None:
    """Why ``request`` will not be graded, or ``None`` when it will be.

    A row without a label is graded only with ``grade_without_label`` (the spec's
    setting); a sample the workflow removed (``remove_sample``) is never graded.
    """
    if sample is not None and sample.remove_sample:
        return SAMPLE_REMOVED
    if not has_grader:
        return "no grader configured"
    if not request.grade:
        return "grading disabled for this request"
    if request.label is None and not grade_without_label:
        return "row has no label"
    return None


async def run_grader_phase(
    request: ExecutionRequest,
    workflow_result: ExecutionResult,
    grader: GraderSource,
    config: GraderConfig,
    artifacts_root: Path | None = None,
    judge: LLMEndpoint | None = None,
    *,
    stalls: LoopStallMonitor | None = None,
) -> ExecutionResult:
    """Grade a successful workflow result under the grader deadline; never raises but for
    cancellation of the caller.

    Returns ``workflow_result`` updated in place: SUCCESS with the reward on its sample
    (or no reward and ``grader_skipped`` when the grader removed the sample), or FAILURE
    (phase ``grader``) that keeps the sample. What the grader explained (``ctx.explain``)
    goes to ``info["grader"]`` either way. The grader runs in a rollout context of its own
    whose endpoint is ``judge`` (``ctx.judge``) and whose usage, the model calls the grader
    made, becomes ``grader_usage`` (apart from the workflow's). ``stalls`` as for
    :func:`run_workflow_phase`.
    """
    started = time.monotonic()
    result = workflow_result
    result.info.pop(GRADER_INFO_KEY, None)  # an earlier grading's (regrade) is not this one's
    timeout_sec = request.grader_timeout_sec
    deadline = None if timeout_sec is None else started + timeout_sec  # per-call retries' bound
    rollout = RolloutContext(rollout_id=request.id, llm=judge, deadline=deadline)
    clock = (
        "grader",
        "grader_timeout_sec",
        request.grader_timeout_sec,
        started,
        request.id,
        stalls,
    )
    warnings: list[str] = []
    graded: list[GraderContext] = []  # the grader's context, once made (for its explanation)
    try:
        if request.grader_timeout_sec is not None and request.grader_timeout_sec <= 0:
            _fail_in_place(result, ErrorCategory.TIMEOUT, PhaseDeadline(*clock).passed_message())
        else:
            await _grade(
                request, result, grader, config, artifacts_root, clock, warnings, rollout, graded
            )
    except _DeadlineExceeded as exc:
        if rollout.retrying is not None:  # waiting out a rate limit: grading fails with it
            error = rollout.retrying
            _fail_in_place(result, categorize_exception(error), describe_exception(error))
        else:
            _fail_in_place(
                result, ErrorCategory.TIMEOUT, exc.deadline.expired_message(exc.abandoned)
            )
    except Exception as exc:
        _fail_in_place(result, categorize_exception(exc), describe_exception(exc))
    explained = graded[0].explained() if graded else None
    if explained is not None:  # kept on failure too: it says how far grading got
        result.info[GRADER_INFO_KEY] = explained
    # a copy: an abandoned grader may still be counting; None replaces an earlier grading's
    result.grader_usage = dataclasses.replace(rollout.usage) if rollout.usage.model_calls else None
    warnings.extend(w for w in rollout.warnings if w not in warnings)  # e.g. unreadable usage
    result.timings.grader_sec = time.monotonic() - started
    sample = result.sample
    if sample is not None and (type(sample.metrics) is not dict or sample.metrics):
        _fit_sample_metrics(result)  # the grader may have added metrics of its own
    if warnings:
        result.warnings.extend(w for w in warnings if w not in result.warnings)
    return result


async def _grade(
    request: ExecutionRequest,
    result: ExecutionResult,
    grader: GraderSource,
    config: GraderConfig,
    artifacts_root: Path | None,
    clock: DeadlineArgs,
    warnings: list[str],
    rollout: RolloutContext,
    graded: list[GraderContext],
) -> None:
    """Run the grader in ``rollout`` (its own context: the judge and its usage) and put its
    reward on ``result``; raises for what the phase reports. The grader's context is
    appended to ``graded`` as soon as it exists."""
    instance = make_grader(grader, config)
    if result.sample is None:
        result.sample = RolloutSample()
    sample = result.sample
    before = sample.reward
    ctx = GraderContext(
        label=request.label,
        sample=sample,
        metadata=request.metadata,
        config=instance.config,
        rollout_id=request.id,
        _artifacts_root=artifacts_root,
        _artifacts_name=request.safe_name,
        _warnings=warnings,
    )
    graded.append(ctx)
    context = contextvars.copy_context()
    context.run(_current.set, rollout)
    context.run(rollout_owner.set, request.id)
    returned = await _await_with_deadline(
        exits_as_errors(instance.grade(ctx), "grader"), clock, context
    )
    timeout = clock[2]
    deadline = None
    if timeout is not None and time.monotonic() - clock[3] > timeout:
        deadline = PhaseDeadline(*clock)
    if deadline is not None and deadline.overrun():
        _fail_in_place(result, ErrorCategory.TIMEOUT, deadline.late_message())
        return
    if sample.remove_sample:
        sample.reward = None
        result.grader_skipped = SAMPLE_REMOVED
    elif ctx.reward is None and returned is not None and sample.reward == before:
        sample.reward = returned  # the common case: one reward, returned (checked on assignment)
    else:
        sample.reward = _one_reward(returned, ctx.reward, sample.reward, before)
    result.status = RolloutStatus.SUCCESS
    if deadline is not None:
        _note_extension(warnings, deadline)


def _one_reward(
    returned: object, set_on_ctx: float | None, on_sample: float | None, before: float | None
) -> float:
    """The reward the grader reported: returned, set with ``ctx.set_reward``, or assigned to
    ``ctx.sample.reward``; a reward the sample carried before grading counts only when the
    grader reported none. Raises ``ValueError`` for none at all or for two that differ."""
    reported: list[tuple[str, float]] = []
    if returned is not None:
        reported.append(("grade() returned", validate_reward(returned)))
    if set_on_ctx is not None:
        reported.append(("ctx.set_reward() was given", set_on_ctx))
    if on_sample is not None and on_sample != before and on_sample != set_on_ctx:
        reported.append(("ctx.sample.reward was set to", on_sample))
    if not reported:
        if before is not None:
            return before
        raise ValueError(
            "grade() returned without a reward: return it, call ctx.set_reward(value) "
            "or set ctx.sample.reward"
        )
    rewards = {reward for _, reward in reported}
    if len(rewards) > 1:
        said = "; ".join(f"{how} {reward:g}" for how, reward in reported)
        raise ValueError(f"the grader reported two different rewards ({said}): report one")
    return reported[0][1]


def _fail_in_place(result: ExecutionResult, category: ErrorCategory, message: str) -> None:
    result.fail(category, message, Phase.GRADER)
    if result.sample is not None:
        result.sample.reward = None


def run_to_completion(main: Coroutine[Any, Any, T], grace_sec: float = CANCEL_GRACE_SEC) -> T:
    """Run ``main`` on a new event loop and return its result.

    Unlike ``asyncio.run``, leftover tasks (a workflow abandoned because it ignored
    cancellation) get ``grace_sec`` to stop and are then left behind instead of hanging
    the process; the loop's default executor is not waited for either.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main)
    finally:
        leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in leftovers:
            task.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.wait(leftovers, timeout=grace_sec))
        loop.set_exception_handler(lambda _loop, _context: None)
        loop.close()
