"""LocalBackend: workflows and graders run in this process, on this event loop."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from osmo_run.backends.base import ExecutionBackend, ProgressPhase, ResultCallback, deliver
from osmo_run.backends.isolation import ProcessPhaseRunner
from osmo_run.errors import InputError
from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.imports import import_path_of, resolve_class
from osmo_run.sdk.model_clients import ModelClients, reset_model_clients, use_model_clients
from osmo_run.sdk.model_layer import ModelLayer, current_model_layer
from osmo_run.sdk.model_limits import endpoint_name
from osmo_run.sdk.rollout import (
    AbandonHandler,
    GraderSource,
    WorkflowSource,
    combine_phases,
    copy_result,
    grader_skip_reason,
    run_grader_phase,
    run_workflow_phase,
)
from osmo_run.sdk.sandbox import grader_input, workflow_input
from osmo_run.sdk.stalls import LoopStallMonitor
from osmo_run.sdk.types import ExecutionRequest, ExecutionResult, RolloutStatus
from osmo_run.sdk.workflow import AgentWorkflow, Grader


class LocalBackend(ExecutionBackend):
    """Run rollouts in this process.

    ``workflow`` and ``grader`` are classes, instances, or ``"module:attr"`` paths
    (resolved at construction; :class:`~osmo_run.errors.ImportPathError` if they do not
    name the right kind of object). At most ``workflow_config.concurrency.max_concurrent``
    rollouts (default 4) run at once; one slot spans a rollout's workflow and grader.

    In process, rows share this event loop: a row whose synchronous code blocks the loop is
    blamed for it (its message says so), and the time it held the loop is added to the
    other rows' deadlines (:mod:`osmo_run.sdk.stalls`). ``isolation="process"`` runs each
    phase in a child process (importing the workflow from ``code_dir``) that is killed when
    it overruns its deadline, so even code that blocks forever cannot hold a row past it.
    In a run (a model layer current when it prepares), the children reach each model
    endpoint through a :class:`~osmo_run.backends.gateway.ModelGateway` on ``127.0.0.1``,
    so their calls are under the run's limits and budget as in-process ones are.

    ``llm`` is the endpoint workflows reach, ``judge`` the one graders reach (``ctx.judge``).
    In-process rollouts share the run's :class:`~osmo_run.sdk.model_clients.ModelClients`
    (one pooled HTTP client per endpoint, sized to the concurrency), closed by
    :meth:`aclose`. Result callbacks may be plain functions or ``async def``: a callback's
    awaitable result is awaited before ``execute`` goes on.
    """

    def __init__(
        self,
        workflow: type[AgentWorkflow] | AgentWorkflow | str,
        workflow_config: AgentWorkflowConfig | None = None,
        grader: type[Grader] | Grader | str | None = None,
        grader_config: GraderConfig | None = None,
        *,
        llm: LLMEndpoint | None = None,
        judge: LLMEndpoint | None = None,
        artifacts_root: Path | None = None,
        isolation: str = "none",
        code_dir: Path | None = None,
    ) -> None:
        self._workflow: WorkflowSource = resolve_class(workflow, AgentWorkflow, "workflow")
        self._grader: GraderSource | None = (
            None if grader is None else resolve_class(grader, Grader, "grader")
        )
        self._workflow_config = workflow_config or AgentWorkflowConfig()
        self._grader_config = grader_config or GraderConfig()
        self._llm = llm
        self._judge = judge
        self._artifacts_root = artifacts_root
        concurrency = self._workflow_config.concurrency.max_concurrent
        self._slots = asyncio.Semaphore(concurrency)
        self._running = 0
        self.model_clients = ModelClients(concurrency)
        self._queued = 0
        self._stalls: LoopStallMonitor | None = None
        if isolation not in ("none", "process"):
            raise InputError(f"isolation: {isolation!r} is not 'none' or 'process'")
        self._isolated: ProcessPhaseRunner | None = None
        if isolation == "process":
            self._workflow_path = import_path_of(workflow, AgentWorkflow, "workflow", False)
            self._grader_path = (
                None if grader is None else import_path_of(grader, Grader, "grader", False)
            )
            keys = (llm.api_key if llm else None, judge.api_key if judge else None)
            self._isolated = ProcessPhaseRunner(code_dir or Path.cwd(), *keys, artifacts_root)
        self.runs_code_in_caller = self._isolated is None
        self._layer: ModelLayer | None = None
        """The run's model layer the children's calls go through (isolated rows only)."""
        self._gateways: dict[str, tuple[Any, str]] = {}
        """Endpoint (``scheme://host:port``) -> its gateway and the origin children use."""
        self._gateway_lock = asyncio.Lock()

    @property
    def max_concurrency(self) -> int:
        return self._workflow_config.concurrency.max_concurrent

    def health(self) -> dict[str, Any]:
        """``status``, ``backend``, ``running``, and ``concurrency``: the limit
        (``max_concurrent``), rollouts waiting for a slot (``queued``) and in one
        (``running``), as osmosis-ai's LocalBackend reports them for schedulers."""
        return {
            "status": "ok",
            "backend": "local",
            "running": self._running,
            "concurrency": {
                "max_concurrent": self.max_concurrency,
                "queued": self._queued,
                "running": self._running,
            },
        }

    def _loop_monitor(self) -> LoopStallMonitor | None:
        """The stall monitor of the running loop, started on first use; ``None`` when rows
        run in child processes (no row's code runs on this loop)."""
        if self._isolated is not None:
            return None
        loop = asyncio.get_running_loop()
        if self._stalls is not None and self._stalls.loop is loop:
            return self._stalls
        if self._stalls is not None:  # the backend moved to another loop (a new asyncio.run)
            self._stalls.close()
        self._stalls = LoopStallMonitor(loop)
        self._stalls.start()
        return self._stalls

    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None:
        entered = time.monotonic()
        self._queued += 1
        try:
            await self._slots.acquire()
        finally:
            self._queued -= 1
        started = time.monotonic()
        self._running += 1
        clients = use_model_clients(self.model_clients)  # this row's task only
        graded = False

        async def before_grading(result: ExecutionResult) -> None:
            nonlocal graded
            graded = True
            if on_grader_complete is not None:  # a copy: the grader works on its own
                grading = copy_result(result)
                grading.status = RolloutStatus.GRADING
                if (pending := deliver(on_workflow_complete, grading)) is not None:
                    await pending

        try:
            final = await self._rollout(request, entered, started, None, before_grading)
            callback = on_grader_complete if graded and on_grader_complete else on_workflow_complete
            if (pending := deliver(callback, final)) is not None:
                await pending
        finally:
            reset_model_clients(clients)
            self._running -= 1
            self._slots.release()

    async def run_rollout(
        self, request: ExecutionRequest, on_abandon: AbandonHandler | None = None
    ) -> ExecutionResult:
        """The direct path: the final result, from phases run in the calling task.

        The caller keeps at most :attr:`max_concurrency` rollouts in flight (the runner's
        workers are that many), so no slot is taken here. With ``on_abandon`` a phase that
        ignores its deadline's cancellation is handed on as a timeout (see
        :func:`~osmo_run.sdk.rollout.run_workflow_phase`) and the calling task then ends
        with :class:`~osmo_run.sdk.phase_deadline.PhaseAbandoned`.
        """
        started = time.monotonic()
        self._running += 1
        clients = use_model_clients(self.model_clients)
        try:
            return await self._rollout(request, started, started, on_abandon, None)
        finally:
            reset_model_clients(clients)
            self._running -= 1

    async def _rollout(
        self,
        request: ExecutionRequest,
        entered: float,
        started: float,
        on_abandon: AbandonHandler | None,
        before_grading: Callable[[ExecutionResult], Awaitable[None]] | None,
    ) -> ExecutionResult:
        """Both phases of ``request``, combined by :func:`combine_phases` into the final
        result (timed from ``started``, queued since ``entered``)."""
        self._report_progress(request.id, ProgressPhase.WORKFLOW)
        stalls = self._stalls  # the running loop's, unless this is a new loop
        if stalls is None or stalls.loop is not asyncio.get_running_loop():
            stalls = self._loop_monitor()
        workflow_abandoned = None
        if on_abandon is not None:

            def workflow_abandoned(timed_out: ExecutionResult) -> None:
                timed_out.timings.queued_sec = started - entered
                on_abandon(_final(timed_out, None, None, started))

        result = await self._workflow_phase(request, stalls, workflow_abandoned)
        result.timings.queued_sec = started - entered
        skip = grader_skip_reason(
            request,
            self._grader is not None,
            grade_without_label=self._grader_config.grade_without_label,
            sample=result.sample,
        )
        if result.status is not RolloutStatus.SUCCESS or skip is not None:
            return _final(result, None, skip, started)
        if before_grading is not None:
            await before_grading(result)
        self._report_progress(request.id, ProgressPhase.GRADER)
        grader_abandoned = None
        if on_abandon is not None:

            def grader_abandoned(timed_out: ExecutionResult) -> None:
                on_abandon(_final(result, timed_out, None, started))

        graded = await self._grader_phase(request, result, stalls, grader_abandoned)
        return _final(result, graded, None, started)

    async def _workflow_phase(
        self,
        request: ExecutionRequest,
        stalls: LoopStallMonitor | None,
        on_abandon: AbandonHandler | None,
    ) -> ExecutionResult:
        llm = self._llm if request.llm is None else request.llm  # a served request's own
        if self._isolated is None:
            return await run_workflow_phase(
                request,
                self._workflow,
                self._workflow_config,
                llm,
                self._artifacts_root,
                stalls=stalls,
                on_abandon=on_abandon,
            )
        llm = await self._through_gateway(llm)
        spec = workflow_input(request, self._workflow_path, self._workflow_config, llm)
        timeout = request.agent_timeout_sec
        return await self._isolated.run("workflow", spec, request.id, timeout, request.llm)

    async def _grader_phase(
        self,
        request: ExecutionRequest,
        workflow_result: ExecutionResult,
        stalls: LoopStallMonitor | None,
        on_abandon: AbandonHandler | None,
    ) -> ExecutionResult:
        """The grader phase's own result (:func:`combine_phases` makes the final one)."""
        assert self._grader is not None
        if self._isolated is None:
            return await run_grader_phase(
                request,
                workflow_result,
                self._grader,
                self._grader_config,
                self._artifacts_root,
                self._judge,
                stalls=stalls,
                on_abandon=on_abandon,
                handed_over=True,  # the row's own: graded in place, not copied
            )
        assert self._grader_path is not None
        judge = await self._through_gateway(self._judge)
        spec = grader_input(request, self._grader_path, self._grader_config, judge)
        spec["workflow_result"] = workflow_result.to_dict()
        return await self._isolated.run("grader", spec, request.id, request.grader_timeout_sec)

    async def prepare(self) -> None:
        message = self.model_clients.capped_message
        if message is not None and self._isolated is None:
            print(f"osmo-run: {message}", file=sys.stderr, flush=True)  # once, before any row
        if self._isolated is None and (self._llm is not None or self._judge is not None):
            await self.model_clients.load()  # not in the first row's time
        if self._isolated is not None:
            self._layer = current_model_layer()
            for endpoint in (self._llm, self._judge):  # before the first row: its time
                await self._through_gateway(endpoint)

    async def _through_gateway(self, llm: LLMEndpoint | None) -> LLMEndpoint | None:
        """``llm`` as an isolated child reaches it: through the run's gateway for its
        endpoint on ``127.0.0.1`` (started on first use) when the run has a model layer,
        else as it is (``osmo-run serve`` has none)."""
        if llm is None or self._layer is None:
            return llm
        endpoint = endpoint_name(llm.base_url)
        async with self._gateway_lock:  # rows of one new endpoint start one gateway
            if endpoint not in self._gateways:
                from osmo_run.backends.gateway import ModelGateway  # aiohttp: only when used

                gateway = ModelGateway(llm.base_url, self._layer)
                port = await gateway.start("127.0.0.1")
                self._gateways[endpoint] = (gateway, f"http://127.0.0.1:{port}")
        origin = self._gateways[endpoint][1]
        parts = urlsplit(llm.base_url)
        return dataclasses.replace(
            llm, base_url=origin + parts.path + ("?" + parts.query if parts.query else "")
        )

    async def aclose(self) -> None:
        await self.model_clients.aclose()
        gateways, self._gateways = list(self._gateways.values()), {}
        for gateway, _ in gateways:
            await gateway.close()
        if self._stalls is not None:
            self._stalls.close()
            self._stalls = None
        if self._isolated is not None:
            self._isolated.close()


def _final(
    workflow: ExecutionResult, graded: ExecutionResult | None, skip: str | None, started: float
) -> ExecutionResult:
    final = combine_phases(workflow, graded, skip)
    final.timings.total_sec = time.monotonic() - started  # a new result: nobody has it yet
    return final
