"""Run one rollout's workflow phase and grader phase, with deadlines and error categories.

Shared by :class:`~osmo_run.backends.local.LocalBackend` (in process) and the sandbox
runner (inside a Harbor trial or a child process, one phase per process), so every backend
classifies the same failure the same way. Stdlib only.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import time
from collections.abc import Callable, Coroutine, Generator
from pathlib import Path
from typing import Any, TypeVar

from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.context import (
    CALLS_BEFORE_FAILURE_KEY,
    GRADER_INFO_KEY,
    AgentWorkflowContext,
    GraderContext,
    LLMEndpoint,
    RolloutContext,
    _current,
    conversation_before_failure,
)
from osmo_run.sdk.deadlines import CANCEL_GRACE_SEC
from osmo_run.sdk.exits import exited_error, exits_as_errors
from osmo_run.sdk.phase_deadline import (
    DeadlineSweeper,
    PhaseAbandoned,
    PhaseClock,
    PhaseDeadline,
)
from osmo_run.sdk.samples import sample_from_output, sample_from_source
from osmo_run.sdk.stalls import LoopStallMonitor, owner_task_name, rollout_owner
from osmo_run.sdk.telemetry import fit_info, fit_metrics, metrics_fit
from osmo_run.sdk.types import (
    NO_BACKEND_DETAILS,
    SAMPLE_REMOVED,
    BackendDetails,
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    Phase,
    RolloutSample,
    RolloutStatus,
    Timings,
    categorize_exception,
    describe_exception,
    validate_reward,
)
from osmo_run.sdk.workflow import AgentWorkflow, Grader

__all__ = [
    "CANCEL_GRACE_SEC",
    "AbandonHandler",
    "GraderSource",
    "PhaseAbandoned",
    "WorkflowSource",
    "categorize_exception",
    "combine_phases",
    "copy_result",
    "describe_exception",
    "grader_skip_reason",
    "make_grader",
    "make_workflow",
    "run_grader_phase",
    "run_to_completion",
    "run_workflow_phase",
    "shallow_result",
    "start_task",
]

T = TypeVar("T")

WorkflowSource = type[AgentWorkflow] | AgentWorkflow
GraderSource = type[Grader] | Grader


class _DeadlineExceeded(Exception):
    def __init__(self, abandoned: bool, deadline: PhaseDeadline) -> None:
        super().__init__()
        self.abandoned = abandoned
        self.deadline = deadline


AbandonHandler = Callable[[ExecutionResult], None]
"""Receives the timeout result of a phase (or a rollout) abandoned because its code
ignored cancellation: the owner of the stuck task moves on with it."""


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


_RAISED_INSIDE = "asyncio.CancelledError was raised inside the rollout's own code"


def _outcome(task: asyncio.Task[T]) -> T:
    """The finished ``task``'s result. A ``CancelledError`` here came from inside: the
    deadline's cancellation is handled before, the caller's never reaches this point."""
    try:
        return task.result()
    except asyncio.CancelledError:
        raise RuntimeError(_RAISED_INSIDE) from None


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


async def _in_own_task(
    coro: Coroutine[Any, Any, T], clock: PhaseClock, context: contextvars.Context
) -> T:
    """Await ``coro`` in its own task (in ``context``); raise ``_DeadlineExceeded`` once the
    deadline passes. For callers that cannot hand a stuck phase on (the sandbox runner,
    :meth:`ExecutionBackend.execute`): a coroutine that swallows cancellation is abandoned
    after ``CANCEL_GRACE_SEC`` so the deadline holds. Cancelling the caller cancels the task.
    """
    task = start_task(coro, context, clock.owner)
    if task.done():  # it finished without waiting: no timer
        try:
            return task.result()
        except asyncio.CancelledError:
            return _outcome(task)  # raised inside: _outcome says so
    deadline = clock.deadline()
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


class _Resumed:
    """Awaiting it goes on with ``coro`` from the point where its first step, taken by
    hand, suspended on ``yielded``: what ``await coro`` would have done from there (sends,
    throws and close passed through), each step run in ``context`` as a task of its own
    would run it."""

    __slots__ = ("_context", "_coro", "_yielded")

    def __init__(
        self, coro: Coroutine[Any, Any, Any], yielded: Any, context: contextvars.Context
    ) -> None:
        self._coro = coro
        self._yielded = yielded
        self._context = context

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        run = self._context.run
        yielded = self._yielded
        self._yielded = None
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    yielded = run(coro.throw, exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = run(coro.send, sent)
                except StopIteration as stop:
                    return stop.value


def _in_place(
    coro: Coroutine[Any, Any, T],
    clock: PhaseClock,
    on_abandon: Callable[[PhaseDeadline], None],
) -> Coroutine[Any, Any, T]:
    """:func:`_in_place_watched`; on Python 3.11 the calling task carries the rollout in
    its name while the phase runs (the stall monitor reads the owner from it there) and
    its own name again after, so the worker's code between rows (recording one, taking the
    next) is no row's. On 3.12 the owner is in a context variable its caller resets: no
    wrapper there, and no cost."""
    watched = _in_place_watched(coro, clock, on_abandon)
    if sys.version_info >= (3, 12):
        return watched
    return _named_for(clock.owner, watched)


async def _named_for(owner: str, phase: Coroutine[Any, Any, T]) -> T:
    """Await ``phase`` with the current task named for ``owner`` (Python 3.11)."""
    task = asyncio.current_task()
    assert task is not None
    name = task.get_name()
    task.set_name(owner_task_name(owner))
    try:
        return await phase
    finally:
        task.set_name(name)


async def _in_place_watched(
    coro: Coroutine[Any, Any, T],
    clock: PhaseClock,
    on_abandon: Callable[[PhaseDeadline], None],
) -> T:
    """Await ``coro`` in the calling task under ``clock``'s deadline, kept by the loop's
    :class:`DeadlineSweeper`: no task and no timer of its own. At the deadline the sweeper
    cancels this task and ``_DeadlineExceeded`` is raised here; code that swallows the
    cancellation past ``CANCEL_GRACE_SEC`` is abandoned: ``on_abandon(deadline)`` hands
    the timeout on, and when the code ends at last :class:`PhaseAbandoned` ends the task.
    A cancellation of the caller's own (an interrupt) propagates as ever.

    The coroutine's steps run in a copy of the task's context, as in a task of its own:
    context variables it sets do not outlive the phase (the next row this task runs does
    not see them). The first step runs before the deadline is watched: a phase that ends
    without waiting (a grader comparing strings) costs no watch at all.
    """
    task = asyncio.current_task()
    assert task is not None
    context = contextvars.copy_context()
    try:
        yielded = context.run(coro.send, None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    except asyncio.CancelledError:
        if task.cancelling():
            raise
        raise RuntimeError(_RAISED_INSIDE) from None
    if clock.timeout_sec is None:
        try:
            return await _Resumed(coro, yielded, context)  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            if task.cancelling():
                raise
            raise RuntimeError(_RAISED_INSIDE) from None
    watch = DeadlineSweeper.of(task.get_loop()).watch(task, clock, on_abandon)
    try:
        value = await _Resumed(coro, yielded, context)
    except asyncio.CancelledError:
        if watch.abandoned:
            raise PhaseAbandoned from None
        if watch.cancelled_at is None:
            if task.cancelling():
                raise  # the caller's
            raise RuntimeError(_RAISED_INSIDE) from None
        if task.uncancel():
            raise  # the caller cancelled too
        raise _DeadlineExceeded(False, watch.deadline or clock.deadline()) from None
    except Exception:
        if watch.abandoned:
            raise PhaseAbandoned from None
        if watch.cancelled_at is not None:  # it turned the deadline's cancellation into this
            if task.uncancel():
                raise asyncio.CancelledError from None
            raise _DeadlineExceeded(False, watch.deadline or clock.deadline()) from None
        raise
    finally:
        watch.done = True
    if watch.abandoned:
        raise PhaseAbandoned
    if watch.cancelled_at is not None:  # it swallowed the deadline's cancellation in time
        if task.uncancel():
            raise asyncio.CancelledError
        raise _DeadlineExceeded(False, watch.deadline or clock.deadline())
    return value  # type: ignore[no-any-return]


def make_workflow(source: WorkflowSource, config: AgentWorkflowConfig) -> AgentWorkflow:
    """A fresh workflow (with its own copy of ``config``) from a class; an instance as is."""
    if isinstance(source, type):  # not isinstance(source, AgentWorkflow): an ABC's check is slow
        return source(config.fresh_copy())
    return source


def make_grader(source: GraderSource, config: GraderConfig) -> Grader:
    """A fresh grader (with its own copy of ``config``) from a class; an instance as is."""
    if isinstance(source, type):
        return source(config.fresh_copy())
    return source


async def run_workflow_phase(
    request: ExecutionRequest,
    workflow: WorkflowSource,
    config: AgentWorkflowConfig,
    llm: LLMEndpoint | None = None,
    artifacts_root: Path | None = None,
    *,
    stalls: LoopStallMonitor | None = None,
    on_abandon: AbandonHandler | None = None,
) -> ExecutionResult:
    """Run the workflow for ``request`` under its agent deadline; never raises but for
    cancellation of the caller (and :class:`PhaseAbandoned`, below).

    Returns a SUCCESS result with the sample, or a FAILURE with category, message and
    phase. ``timings.workflow_sec``, ``usage`` (the model calls the workflow made) and
    ``warnings`` are set either way. ``stalls`` watches the loop this phase shares with
    other rows: their stalls extend its deadline, its own count against it.

    With ``on_abandon`` the workflow runs in the calling task (no task of its own; the
    loop's :class:`DeadlineSweeper` keeps the deadline). A workflow that ignores the
    deadline's cancellation for ``CANCEL_GRACE_SEC`` is abandoned: its timeout result goes
    to ``on_abandon`` at once, and the calling task, when the workflow finally returns,
    ends with :class:`PhaseAbandoned`. Without it the workflow runs in a task of its own,
    left behind when abandoned.
    """
    started = time.monotonic()
    timeout_sec = request.agent_timeout_sec
    deadline = None if timeout_sec is None else started + timeout_sec  # per-call retries' bound
    rollout = RolloutContext(rollout_id=request.id, llm=llm, deadline=deadline)
    clock = PhaseClock("workflow", "agent_timeout_sec", timeout_sec, started, request.id, stalls)
    try:
        if timeout_sec is not None and timeout_sec <= 0:
            message = clock.deadline().passed_message()
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
                _artifacts_name=request.name,  # None: derived from the id when first needed
                _warnings=rollout.warnings,
            )
            produced = _produce(instance, ctx, rollout)
            if on_abandon is None:
                context = contextvars.copy_context()
                context.run(_current.set, rollout)  # also how the stall monitor knows the row
                sample, info = await _in_own_task(produced, clock, context)
            else:

                def abandoned(deadline: PhaseDeadline) -> None:
                    timed_out = _workflow_timeout(request, rollout, deadline, True)
                    on_abandon(_finish_workflow(timed_out, started, rollout))

                token = _current.set(rollout)  # in the task's own context: the stall monitor
                try:
                    sample, info = await _in_place(produced, clock, abandoned)
                finally:
                    _current.reset(token)
            result = _workflow_result(request, clock, sample, info)
    except _DeadlineExceeded as exc:
        result = _workflow_timeout(request, rollout, exc.deadline, exc.abandoned)
    except Exception as exc:
        result = ExecutionResult.from_exception(request.id, exc, Phase.WORKFLOW)
    return _finish_workflow(result, started, rollout)


async def _produce(
    instance: AgentWorkflow, ctx: AgentWorkflowContext, rollout: RolloutContext
) -> tuple[RolloutSample, dict[str, Any]]:
    """The workflow's sample and info: what it returned, or what its sample source gives
    (under the same deadline)."""
    try:  # as exits_as_errors does, without a coroutine of its own per rollout
        output = await instance.run(ctx)
    except SystemExit as exc:
        raise exited_error(exc, "workflow") from None
    sample, info = sample_from_output(output)
    if sample is None:
        sample = await sample_from_source(rollout, output)
    return sample, info


def _workflow_timeout(
    request: ExecutionRequest, rollout: RolloutContext, deadline: PhaseDeadline, abandoned: bool
) -> ExecutionResult:
    if rollout.retrying is not None:  # waiting out a rate limit: the row fails with it
        return ExecutionResult.from_exception(request.id, rollout.retrying, Phase.WORKFLOW)
    message = deadline.expired_message(abandoned)
    return ExecutionResult.failure(request.id, ErrorCategory.TIMEOUT, message, Phase.WORKFLOW)


def _finish_workflow(
    result: ExecutionResult, started: float, rollout: RolloutContext
) -> ExecutionResult:
    """``result`` with the phase's time, the warnings and the model usage of the rollout."""
    result.timings.workflow_sec = time.monotonic() - started
    if rollout.warnings:
        result.warnings.extend(rollout.warnings)
    usage = rollout.usage  # copied: an abandoned workflow may still be counting
    if rollout.turns:  # a failed rollout keeps its captured calls too
        result.turns = list(rollout.turns)
    if usage.model_calls or usage.retried_calls:  # retried calls show even when none answered
        result.usage = usage.copy()
        if result.sample is None and rollout.last_call is not None:  # failed: what it got to
            before = conversation_before_failure(rollout)
            if before is not None:
                result.info = {**result.info, CALLS_BEFORE_FAILURE_KEY: before}
    return result


def _workflow_result(
    request: ExecutionRequest,
    clock: PhaseClock,
    sample: RolloutSample,
    info: dict[str, Any],
) -> ExecutionResult:
    """The result of a workflow that returned: a timeout when it returned late, else the
    sample with its telemetry made writable."""
    deadline = clock.past_wall_clock()  # only past it can the phase have overrun
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
    on_abandon: AbandonHandler | None = None,
    handed_over: bool = False,
) -> ExecutionResult:
    """Grade a successful workflow result under the grader deadline; never raises but for
    cancellation of the caller (and :class:`PhaseAbandoned`).

    Returns a new result; ``workflow_result`` is left as it is (the grader works on a copy
    of it): SUCCESS with the reward on its sample (or no reward and ``grader_skipped`` when
    the grader removed the sample), or FAILURE (phase ``grader``) that keeps the sample.
    With ``handed_over`` the caller gives ``workflow_result`` up instead (nobody else holds
    it, and it is read afterwards only by :func:`combine_phases`, as the workflow phase's
    result): it is graded and returned itself, with a sample of its own (the message list
    and metrics the workflow returned are never changed), which saves copying the rest of
    it once per row.
    What the grader explained (``ctx.explain``) goes to ``info["grader"]`` either way. The
    grader runs in a rollout context of its own whose endpoint is ``judge`` (``ctx.judge``)
    and whose usage, the model calls the grader made, becomes ``grader_usage`` (apart from
    the workflow's). ``stalls`` and ``on_abandon`` as for :func:`run_workflow_phase`.
    """
    started = time.monotonic()
    if handed_over:
        result = workflow_result
        if result.sample is not None:
            result.sample = _sample_copy(result.sample)
    else:
        result = copy_result(workflow_result)
    given = None if result.sample is None else result.sample.metrics  # the grader's copy
    result.info.pop(GRADER_INFO_KEY, None)  # an earlier grading's (regrade) is not this one's
    timeout_sec = request.grader_timeout_sec
    deadline = None if timeout_sec is None else started + timeout_sec  # per-call retries' bound
    rollout = RolloutContext(rollout_id=request.id, llm=judge, deadline=deadline)
    clock = PhaseClock("grader", "grader_timeout_sec", timeout_sec, started, request.id, stalls)
    warnings: list[str] = []
    graded: list[GraderContext] = []  # the grader's context, once made (for its explanation)
    abandoned = None
    if on_abandon is not None:

        def abandoned(deadline: PhaseDeadline) -> None:
            timed_out = copy_result(result)  # the stuck grader still holds the sample
            _grader_timeout(timed_out, rollout, deadline, True)
            on_abandon(_finish_grader(timed_out, started, rollout, list(warnings), graded))

    try:
        if timeout_sec is not None and timeout_sec <= 0:
            _fail_in_place(result, ErrorCategory.TIMEOUT, clock.deadline().passed_message())
        else:
            await _grade(
                request,
                result,
                grader,
                config,
                artifacts_root,
                clock,
                warnings,
                rollout,
                graded,
                abandoned,
            )
    except _DeadlineExceeded as exc:
        _grader_timeout(result, rollout, exc.deadline, exc.abandoned)
    except Exception as exc:
        _fail_in_place(result, categorize_exception(exc), describe_exception(exc))
    return _finish_grader(result, started, rollout, warnings, graded, given)


def _grader_timeout(
    result: ExecutionResult, rollout: RolloutContext, deadline: PhaseDeadline, abandoned: bool
) -> None:
    if rollout.retrying is not None:  # waiting out a rate limit: grading fails with it
        error = rollout.retrying
        _fail_in_place(result, categorize_exception(error), describe_exception(error))
    else:
        _fail_in_place(result, ErrorCategory.TIMEOUT, deadline.expired_message(abandoned))


def _finish_grader(
    result: ExecutionResult,
    started: float,
    rollout: RolloutContext,
    warnings: list[str],
    graded: list[GraderContext],
    given_metrics: object = None,
) -> ExecutionResult:
    """``result`` with what the grader explained, its usage, its time and its warnings;
    its metrics fitted again unless they are still ``given_metrics``, the dict handed to
    the grader (fitted already: a copy of the workflow phase's), and still fit."""
    explained = graded[0].explained() if graded else None
    if explained is not None:  # kept on failure too: it says how far grading got
        result.info[GRADER_INFO_KEY] = explained
    # a copy: an abandoned grader may still be counting; None replaces an earlier grading's
    result.grader_usage = rollout.usage.copy() if rollout.usage.model_calls else None
    warnings.extend(w for w in rollout.warnings if w not in warnings)  # e.g. unreadable usage
    result.timings.grader_sec = time.monotonic() - started
    sample = result.sample
    if sample is not None and (type(sample.metrics) is not dict or sample.metrics):
        metrics = sample.metrics
        if metrics is not given_metrics or not metrics_fit(metrics):
            _fit_sample_metrics(result)  # the grader added, changed or replaced metrics
    if warnings:
        result.warnings.extend(w for w in warnings if w not in result.warnings)
    return result


async def _grade(
    request: ExecutionRequest,
    result: ExecutionResult,
    grader: GraderSource,
    config: GraderConfig,
    artifacts_root: Path | None,
    clock: PhaseClock,
    warnings: list[str],
    rollout: RolloutContext,
    graded: list[GraderContext],
    on_abandon: Callable[[PhaseDeadline], None] | None,
) -> None:
    """Run the grader in ``rollout`` (its own context: the judge and its usage) and put its
    reward on ``result``; raises for what the phase reports. The grader's context is
    appended to ``graded`` as soon as it exists. With ``on_abandon`` the grader runs in
    the calling task (see :func:`run_workflow_phase`)."""
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
        _artifacts_name=request.name,  # None: derived from the id when first needed
        _warnings=warnings,
    )
    graded.append(ctx)
    grading = exits_as_errors(instance.grade(ctx), "grader")
    if on_abandon is None:
        context = contextvars.copy_context()
        context.run(_current.set, rollout)
        context.run(rollout_owner.set, request.id)
        returned = await _in_own_task(grading, clock, context)
    else:
        token = _current.set(rollout)
        owner = rollout_owner.set(request.id)
        try:
            returned = await _in_place(grading, clock, on_abandon)
        finally:
            rollout_owner.reset(owner)
            _current.reset(token)
    deadline = clock.past_wall_clock()
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


def copy_result(result: ExecutionResult) -> ExecutionResult:
    """A copy of ``result`` that can be changed without changing it: its own sample (the
    message list copied, not the messages), metrics, info, backend, timings and warnings."""
    copied = object.__new__(ExecutionResult)
    copied.__dict__.update(result.__dict__)
    sample = result.sample
    if sample is not None:
        copied.sample = _sample_copy(sample)
    copied.info = dict(result.info)
    copied.backend = result.backend  # immutable: shared
    copied.warnings = list(result.warnings)
    timings = object.__new__(Timings)
    timings.__dict__.update(result.timings.__dict__)
    copied.timings = timings
    return copied


def _sample_copy(sample: RolloutSample) -> RolloutSample:
    """A copy of ``sample`` with its own message list and metrics (not the messages)."""
    return RolloutSample(
        list(sample.messages),
        dict(sample.metrics) if type(sample.metrics) is dict else sample.metrics,
        sample.reward,
        sample.remove_sample,
    )


def combine_phases(
    workflow: ExecutionResult,
    graded: ExecutionResult | None,
    skipped: str | None = None,
) -> ExecutionResult:
    """The final result of a rollout from its workflow phase's result and its grader
    phase's (``None``: not graded; ``skipped`` says why, for a successful workflow). Pure:
    a new result with timings and warnings of its own, neither argument changed (their
    samples are shared, not copied, unless one must change); the same for every backend.

    The grader phase's result comes from a copy of the workflow's (in this process, or
    from a grader process given it as JSON), so it repeats the workflow's warnings: each
    warning is kept once, the workflow's first. The sample and info are the grader's (the
    workflow's when a failed grader returned none: a grader runner that could not load
    its grader); the workflow's own time, queueing and usage are the workflow phase's.
    """
    if graded is None:
        final = shallow_result(workflow)
        if final.status is RolloutStatus.SUCCESS:
            final.grader_skipped = skipped
            sample = final.sample
            if skipped == SAMPLE_REMOVED and sample is not None and sample.reward is not None:
                final.sample = sample = copy_result(workflow).sample
                assert sample is not None
                sample.reward = None
        return final
    final = shallow_result(graded)
    if final.sample is None:
        final.sample = workflow.sample
    if workflow.info and not graded.info:  # a grader runner that failed before it began
        final.info = workflow.info
    if workflow.warnings:
        own = [w for w in graded.warnings if w not in workflow.warnings]
        final.warnings = [*workflow.warnings, *own]
    final.timings.workflow_sec = workflow.timings.workflow_sec
    final.timings.queued_sec = workflow.timings.queued_sec
    final.usage = workflow.usage
    final.turns = workflow.turns
    if workflow.backend is not NO_BACKEND_DETAILS:  # the grader's details win where both say
        both = {**workflow.backend.to_dict(), **graded.backend.to_dict()}
        final.backend = BackendDetails.from_dict(both)
    return final


def shallow_result(result: ExecutionResult) -> ExecutionResult:
    """A copy of ``result`` sharing its sample, info and backend, with timings and a
    warning list of its own: what one who did not make ``result`` changes instead of it
    (a final result's timings, its masked error, a warning), in about a microsecond."""
    copied = object.__new__(ExecutionResult)
    copied.__dict__.update(result.__dict__)
    timings = object.__new__(Timings)
    timings.__dict__.update(result.timings.__dict__)
    copied.timings = timings
    copied.warnings = list(result.warnings)
    return copied


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
