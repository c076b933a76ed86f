"""LocalBackend: workflows and graders run in this process, on this event loop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from osmo_run.backends.base import ExecutionBackend
from osmo_run.sdk._imports import resolve_class
from osmo_run.sdk._rollout import (
    GraderSource,
    ResultCallback,
    WorkflowSource,
    grader_skip_reason,
    run_grader_phase,
    run_workflow_phase,
)
from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.types import ExecutionRequest, RolloutStatus
from osmo_run.sdk.workflow import AgentWorkflow, Grader


class LocalBackend(ExecutionBackend):
    """Run rollouts in this process.

    ``workflow`` and ``grader`` are classes, instances, or ``"module:attr"`` paths
    (resolved at construction; :class:`~osmo_run.errors.ImportPathError` if they do not
    name the right kind of object). At most ``workflow_config.concurrency.max_concurrent``
    rollouts (default 4) run at once; one slot spans a rollout's workflow and grader.
    """

    def __init__(
        self,
        workflow: type[AgentWorkflow] | AgentWorkflow | str,
        workflow_config: AgentWorkflowConfig | None = None,
        grader: type[Grader] | Grader | str | None = None,
        grader_config: GraderConfig | None = None,
        *,
        llm: LLMEndpoint | None = None,
        artifacts_root: Path | None = None,
    ) -> None:
        self._workflow: WorkflowSource = resolve_class(workflow, AgentWorkflow, "workflow")
        self._grader: GraderSource | None = (
            None if grader is None else resolve_class(grader, Grader, "grader")
        )
        self._workflow_config = workflow_config or AgentWorkflowConfig()
        self._grader_config = grader_config or GraderConfig()
        self._llm = llm
        self._artifacts_root = artifacts_root
        self._slots = asyncio.Semaphore(self._workflow_config.concurrency.max_concurrent)
        self._running = 0

    @property
    def max_concurrency(self) -> int:
        return self._workflow_config.concurrency.max_concurrent

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "backend": "local", "running": self._running}

    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None:
        entered = time.monotonic()
        async with self._slots:
            started = time.monotonic()
            self._running += 1
            try:
                self._report_progress(request.id, "workflow")
                result = await run_workflow_phase(
                    request, self._workflow, self._workflow_config, self._llm, self._artifacts_root
                )
                result.timings.queued_sec = started - entered
                skip = grader_skip_reason(request, self._grader is not None)
                if result.status is not RolloutStatus.SUCCESS or skip is not None:
                    result.grader_skipped = skip if result.ok else None
                    result.timings.total_sec = time.monotonic() - started
                    on_workflow_complete(result)
                    return
                if on_grader_complete is not None:
                    result.status = RolloutStatus.GRADING
                    on_workflow_complete(result)
                self._report_progress(request.id, "grader")
                assert self._grader is not None
                result = await run_grader_phase(
                    request, result, self._grader, self._grader_config, self._artifacts_root
                )
                result.timings.total_sec = time.monotonic() - started
                (on_grader_complete or on_workflow_complete)(result)
            finally:
                self._running -= 1
