"""Run one rollout's workflow phase and grader phase, with deadlines and error categories.

Shared by :class:`~osmo_run.backends.local.LocalBackend` (in process) and the sandbox
runner (inside a Harbor trial, a separate process per phase), so both backends classify
the same failure the same way. Stdlib only.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import math
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
from osmo_run.sdk.types import (
    AgentWorkflowOutput,
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    Phase,
    RolloutSample,
    RolloutStatus,
    categorize_exception,
    describe_exception,
)
from osmo_run.sdk.workflow import AgentWorkflow, Grader

T = TypeVar("T")

WorkflowSource = type[AgentWorkflow] | AgentWorkflow
GraderSource = type[Grader] | Grader


class _DeadlineExceeded(Exception):
    def __init__(self, abandoned: bool) -> None:
        super().__init__()
        self.abandoned = abandoned


def _swallow_result(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # marks it retrieved: an abandoned task must not warn at exit


def start_task(
    coro: Coroutine[Any, Any, T], context: contextvars.Context | None = None
) -> asyncio.Task[T]:
    """A task for ``coro`` that, on Python >= 3.12, runs its first step right away: a
    coroutine that finishes without waiting costs no trip through the event loop."""
    loop = asyncio.get_running_loop()
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, context=context, eager_start=True)
    return loop.create_task(coro, context=context)


async def _await_with_deadline(
    coro: Coroutine[Any, Any, Any], timeout_sec: float | None, context: contextvars.Context
) -> Any:
    """Await ``coro`` in its own task; raise ``_DeadlineExceeded`` once ``timeout_sec`` passes.

    A coroutine that swallows cancellation is abandoned after ``CANCEL_GRACE_SEC`` so the
    deadline holds. Cancelling the caller cancels the task.
    """
    task = start_task(coro, context)
    if task.done():  # finished without ever waiting: no timer, no scheduling
        return task.result()
    if timeout_sec is None:
        return await task
    if timeout_sec <= 0:
        task.cancel()
    try:
        done, _ = await asyncio.wait((task,), timeout=max(timeout_sec, 0.0))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if done:
        return task.result()
    task.cancel()
    done, _ = await asyncio.wait((task,), timeout=CANCEL_GRACE_SEC)
    if not done:
        task.add_done_callback(_swallow_result)
    elif not task.cancelled():
        _swallow_result(task)
    raise _DeadlineExceeded(abandoned=not done)


def _deadline_message(what: str, field_name: str, timeout_sec: float, abandoned: bool) -> str:
    text = f"{what} exceeded its {timeout_sec:g}s deadline ({field_name})"
    if abandoned:
        text += f" and ignored cancellation; abandoned after {CANCEL_GRACE_SEC:g}s"
    return text


def _late_message(what: str, field_name: str, timeout_sec: float, elapsed: float) -> str:
    return (
        f"{what} returned after its {timeout_sec:g}s deadline ({field_name}) in {elapsed:.2f}s; "
        "synchronous code blocked the event loop (use asyncio or run blocking work in a thread)"
    )


def _check_metrics(metrics: object) -> dict[str, float]:
    if not isinstance(metrics, dict):
        raise TypeError(f"metrics must be a dict of numbers, got {type(metrics).__name__}")
    checked: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"metrics[{key!r}] must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"metrics[{key!r}] must be finite, got {value}")
        checked[str(key)] = value
    return checked


def _check_messages(messages: object) -> list[dict[str, Any]]:
    if not isinstance(messages, list):
        raise TypeError(f"messages must be a list of dicts, got {type(messages).__name__}")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise TypeError(f"messages[{i}] must be a dict with a 'role', got {message!r:.80}")
    return messages


def sample_from_output(
    output: object, rollout: RolloutContext
) -> tuple[RolloutSample | None, dict[str, Any]]:
    """Turn what ``run()`` returned into ``(sample, info)``.

    A message list or :class:`AgentWorkflowOutput` becomes the sample; ``None`` (or an
    output without messages) defers to the registered sample source. Raises
    ``TypeError``/``ValueError`` (a validation error) for anything else.
    """
    if isinstance(output, list):
        return RolloutSample(messages=_check_messages(output)), {}
    if isinstance(output, AgentWorkflowOutput):
        metrics = _check_metrics(output.metrics)
        if output.messages is not None:
            return RolloutSample(_check_messages(output.messages), metrics), dict(output.info)
        sample = _sample_from_source(rollout) or RolloutSample()
        sample.metrics = {**sample.metrics, **metrics}
        return sample, dict(output.info)
    if output is None:
        return _sample_from_source(rollout), {}
    raise TypeError(
        f"run() returned {type(output).__name__}; return a list of messages, "
        "an AgentWorkflowOutput, or None with a registered sample source"
    )


def _sample_from_source(rollout: RolloutContext) -> RolloutSample | None:
    source = rollout.sample_source
    if source is None:
        return None
    sample = source.get_sample()
    if sample is not None:
        _check_messages(sample.messages)
        _check_metrics(sample.metrics)
    return sample


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
) -> ExecutionResult:
    """Run the workflow for ``request`` under its agent deadline; never raises but for
    cancellation of the caller.

    Returns a SUCCESS result with the sample, or a FAILURE with category, message and
    phase. ``timings.workflow_sec`` and ``usage`` (the model calls the workflow made) are
    set either way.
    """
    started = time.monotonic()
    timeout_sec = request.agent_timeout_sec
    deadline = None if timeout_sec is None else started + timeout_sec
    rollout = RolloutContext(rollout_id=request.id, llm=llm, deadline=deadline)
    context = contextvars.copy_context()
    context.run(_current.set, rollout)
    try:
        instance = make_workflow(workflow, config)
        ctx = AgentWorkflowContext(
            prompt=request.prompt,
            config=instance.config,
            metadata=request.metadata,
            rollout_id=request.id,
            _artifacts_root=artifacts_root,
        )
        output = await _await_with_deadline(instance.run(ctx), timeout_sec, context)
        elapsed = time.monotonic() - started
        if timeout_sec is not None and elapsed > timeout_sec:
            message = _late_message("workflow", "agent_timeout_sec", timeout_sec, elapsed)
            result = ExecutionResult.failure(
                request.id, ErrorCategory.TIMEOUT, message, Phase.WORKFLOW
            )
        else:
            sample, info = context.run(sample_from_output, output, rollout)
            result = ExecutionResult(request.id, RolloutStatus.SUCCESS, sample=sample, info=info)
    except _DeadlineExceeded as exc:
        assert timeout_sec is not None
        message = _deadline_message("workflow", "agent_timeout_sec", timeout_sec, exc.abandoned)
        result = ExecutionResult.failure(request.id, ErrorCategory.TIMEOUT, message, Phase.WORKFLOW)
    except Exception as exc:
        result = ExecutionResult.from_exception(request.id, exc, Phase.WORKFLOW)
    result.timings.workflow_sec = time.monotonic() - started
    usage = rollout.usage  # copied: an abandoned workflow may still be counting
    if usage.model_calls or usage.retried_calls:  # retried calls show even when none answered
        result.usage = dataclasses.replace(usage)
    return result


def grader_skip_reason(request: ExecutionRequest, has_grader: bool) -> str | None:
    """Why ``request`` will not be graded, or ``None`` when it will be."""
    if not has_grader:
        return "no grader configured"
    if not request.grade:
        return "grading disabled for this request"
    if request.label is None:
        return "row has no label"
    return None


async def run_grader_phase(
    request: ExecutionRequest,
    workflow_result: ExecutionResult,
    grader: GraderSource,
    config: GraderConfig,
    artifacts_root: Path | None = None,
    judge: LLMEndpoint | None = None,
) -> ExecutionResult:
    """Grade a successful workflow result under the grader deadline; never raises but for
    cancellation of the caller.

    Returns ``workflow_result`` updated in place: SUCCESS with the reward on its sample,
    or FAILURE (phase ``grader``) that keeps the sample. What the grader explained
    (``ctx.explain``) goes to ``info["grader"]`` either way. The grader runs in a rollout
    context of its own whose endpoint is ``judge`` (``ctx.judge``) and whose usage, the
    model calls the grader made, becomes ``grader_usage`` (apart from the workflow's).
    """
    started = time.monotonic()
    result = workflow_result
    result.info.pop(GRADER_INFO_KEY, None)  # an earlier grading's (regrade) is not this one's
    timeout_sec = request.grader_timeout_sec
    deadline = None if timeout_sec is None else started + timeout_sec  # per-call retries' bound
    rollout = RolloutContext(rollout_id=request.id, llm=judge, deadline=deadline)
    context = contextvars.copy_context()
    context.run(_current.set, rollout)
    ctx: GraderContext | None = None
    try:
        instance = make_grader(grader, config)
        ctx = GraderContext(
            label=request.label,
            sample=result.sample,
            metadata=request.metadata,
            config=instance.config,
            rollout_id=request.id,
            _artifacts_root=artifacts_root,
        )
        returned = await _await_with_deadline(instance.grade(ctx), timeout_sec, context)
        elapsed = time.monotonic() - started
        if timeout_sec is not None and elapsed > timeout_sec:
            message = _late_message("grader", "grader_timeout_sec", timeout_sec, elapsed)
            _fail_in_place(result, ErrorCategory.TIMEOUT, message)
        else:
            if returned is not None:
                ctx.set_reward(returned)
            if ctx.reward is None:
                raise ValueError("grade() returned without a reward: call ctx.set_reward(value)")
            if result.sample is None:
                result.sample = RolloutSample()
            result.sample.reward = ctx.reward
            result.status = RolloutStatus.SUCCESS
    except _DeadlineExceeded as exc:
        assert timeout_sec is not None
        message = _deadline_message("grader", "grader_timeout_sec", timeout_sec, exc.abandoned)
        _fail_in_place(result, ErrorCategory.TIMEOUT, message)
    except Exception as exc:
        _fail_in_place(result, categorize_exception(exc), describe_exception(exc))
    explained = None if ctx is None else ctx.explained()
    if explained is not None:  # kept on failure too: it says how far grading got
        result.info[GRADER_INFO_KEY] = explained
    # a copy: an abandoned grader may still be counting; None replaces an earlier grading's
    result.grader_usage = dataclasses.replace(rollout.usage) if rollout.usage.model_calls else None
    result.timings.grader_sec = time.monotonic() - started
    return result


def _fail_in_place(result: ExecutionResult, category: ErrorCategory, message: str) -> None:
    result.status = RolloutStatus.FAILURE
    result.error_category = category
    result.error_message = message
    result.error_phase = Phase.GRADER
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
