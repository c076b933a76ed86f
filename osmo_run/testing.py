"""Test helpers for workflow and grader authors, and a scripted backend for code that drives
backends.

Run one workflow or grader on a prompt and a label, without a dataset, a spec or the
runner, exactly as a rollout runs it (deadlines, error categories, the sample source,
usage)::

    from osmo_run.testing import run_rollout, run_workflow

    async def test_my_workflow_answers() -> None:
        result = await run_workflow(MyWorkflow, "What is 2+2?")
        assert result.ok and result.sample.messages[-1]["content"] == "4"

    async def test_my_grader_scores_the_answer() -> None:
        result = await run_rollout(MyWorkflow, "What is 2+2?", label="4", grader=MyGrader)
        assert result.reward == 1.0

Failures come back as results (``result.error_category``, ``error_message``), never as
exceptions, as they do in a run. :class:`FakeBackend` answers requests from a function, for
testing a runner, a scheduler or a harness without running any workflow.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from osmo_run.backends.base import ExecutionBackend, ResultCallback
from osmo_run.backends.local import LocalBackend
from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.rollout import run_grader_phase, run_workflow_phase
from osmo_run.sdk.types import (
    ExecutionRequest,
    ExecutionResult,
    Message,
    RolloutSample,
    RolloutStatus,
)
from osmo_run.sdk.workflow import AgentWorkflow, Grader

__all__ = ["FakeBackend", "make_request", "run_grader", "run_rollout", "run_workflow"]

Prompt = str | list[Message]
"""A prompt: one user message as a string, or a message list."""


def make_request(
    prompt: Prompt,
    *,
    label: Any = None,
    metadata: dict[str, Any] | None = None,
    rollout_id: str = "test",
    agent_timeout_sec: float | None = 60.0,
    grader_timeout_sec: float | None = 60.0,
) -> ExecutionRequest:
    """An :class:`ExecutionRequest` as a dataset row would give it."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    return ExecutionRequest(
        id=rollout_id,
        prompt=list(messages),
        label=label,
        metadata=dict(metadata or {}),
        agent_timeout_sec=agent_timeout_sec,
        grader_timeout_sec=grader_timeout_sec,
    )


async def run_workflow(
    workflow: type[AgentWorkflow] | AgentWorkflow,
    prompt: Prompt,
    *,
    metadata: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    llm: LLMEndpoint | None = None,
    timeout_sec: float | None = 60.0,
    artifacts_dir: Path | None = None,
) -> ExecutionResult:
    """Run ``workflow``'s phase of one rollout: SUCCESS with its sample, or FAILURE with the
    error category, message and phase a run would record. ``llm`` is what ``ctx.llm``
    returns; ``artifacts_dir`` the root of ``ctx.artifacts_dir``."""
    request = make_request(prompt, metadata=metadata, agent_timeout_sec=timeout_sec)
    config = AgentWorkflowConfig(settings=dict(settings or {}))
    return await run_workflow_phase(request, workflow, config, llm, artifacts_dir)


async def run_grader(
    grader: type[Grader] | Grader,
    sample: RolloutSample | list[Message],
    label: Any,
    *,
    metadata: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    timeout_sec: float | None = 60.0,
    artifacts_dir: Path | None = None,
    judge: LLMEndpoint | None = None,
) -> ExecutionResult:
    """Grade ``sample`` (or a message list) against ``label``: SUCCESS with the reward on
    ``result.reward``, or FAILURE in the grader phase. ``judge`` is what ``ctx.judge``
    returns (the spec's ``judge`` section); the grader's model calls are
    ``result.grader_usage``."""
    if not isinstance(sample, RolloutSample):
        sample = RolloutSample(messages=list(sample))
    request = make_request(
        sample.messages, label=label, metadata=metadata, grader_timeout_sec=timeout_sec
    )
    graded = ExecutionResult(request.id, RolloutStatus.SUCCESS, sample=sample)
    config = GraderConfig(settings=dict(settings or {}))
    return await run_grader_phase(request, graded, grader, config, artifacts_dir, judge)


async def run_rollout(
    workflow: type[AgentWorkflow] | AgentWorkflow,
    prompt: Prompt,
    *,
    label: Any = None,
    grader: type[Grader] | Grader | None = None,
    metadata: dict[str, Any] | None = None,
    workflow_settings: dict[str, Any] | None = None,
    grader_settings: dict[str, Any] | None = None,
    llm: LLMEndpoint | None = None,
    agent_timeout_sec: float | None = 60.0,
    grader_timeout_sec: float | None = 60.0,
    artifacts_dir: Path | None = None,
    judge: LLMEndpoint | None = None,
) -> ExecutionResult:
    """One whole rollout through :class:`~osmo_run.backends.local.LocalBackend`: the
    workflow, then the grader when one is given and ``label`` is not ``None`` (otherwise
    ``result.grader_skipped`` says why). The final result, as the output row holds it.
    ``llm`` is the workflow's endpoint, ``judge`` the grader's."""
    backend = LocalBackend(
        workflow,
        AgentWorkflowConfig(settings=dict(workflow_settings or {})),
        grader,
        GraderConfig(settings=dict(grader_settings or {})),
        llm=llm,
        judge=judge,
        artifacts_root=artifacts_dir,
    )
    request = make_request(
        prompt,
        label=label,
        metadata=metadata,
        agent_timeout_sec=agent_timeout_sec,
        grader_timeout_sec=grader_timeout_sec,
    )
    results: list[ExecutionResult] = []
    try:
        await backend.execute(request, results.append)
    finally:
        await backend.aclose()
    return results[-1]


Respond = Callable[[ExecutionRequest], ExecutionResult | Awaitable[ExecutionResult | None] | None]


class FakeBackend(ExecutionBackend):
    """A backend whose results come from ``respond(request)``: a result (delivered as the
    final one), ``None`` (no result at all: a backend bug, as the runner must survive), an
    awaitable of either, or an exception (raised from :meth:`execute`, like a crashing
    backend). The default answers every request with a successful empty sample.

    ``requests`` lists what was executed, in order; ``peak_in_flight`` the most calls that
    were in :meth:`execute` at once, at most ``max_concurrency`` (``0``: no limit).
    """

    def __init__(self, respond: Respond | None = None, max_concurrency: int = 4) -> None:
        self._respond = respond or _succeed
        self._limit = max_concurrency
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.requests: list[ExecutionRequest] = []
        self.in_flight = 0
        self.peak_in_flight = 0

    @property
    def max_concurrency(self) -> int:
        return self._limit

    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None:
        if self._slots is None:
            await self._answer(request, on_workflow_complete)
            return
        async with self._slots:
            await self._answer(request, on_workflow_complete)

    async def _answer(self, request: ExecutionRequest, deliver: ResultCallback) -> None:
        self.requests.append(request)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            answer = self._respond(request)
            if inspect.isawaitable(answer):
                answer = await answer
        finally:
            self.in_flight -= 1
        if answer is not None:
            deliver(answer)


def _succeed(request: ExecutionRequest) -> ExecutionResult:
    return ExecutionResult(request.id, RolloutStatus.SUCCESS, sample=RolloutSample())
