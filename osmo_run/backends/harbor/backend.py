"""HarborBackend: every row runs as its own Harbor trial.

Per row: a trial from the row's task directory; osmo-run's agent plugin runs the workflow
inside the environment through the sandbox runner; osmo-run's verifier plugin runs the
grader there (or the task's own ``tests/test.sh`` when no grader is configured); results
come back as files in the trial directory and are mapped by :mod:`.results`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import ipaddress
import json
import re
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from harbor.models.environment_type import EnvironmentType
from harbor.models.trial.config import (
    AgentConfig,
    EnvironmentConfig,
    TaskConfig,
    TrialConfig,
    VerifierConfig,
)
from harbor.models.trial.result import TrialResult
from harbor.trial.hooks import TrialEvent, TrialHookEvent
from harbor.trial.queue import TrialQueue

from osmo_run.backends.base import ExecutionBackend
from osmo_run.backends.harbor import docker as docker_ops
from osmo_run.backends.harbor.environment import PREBUILT_IMAGE_IMPORT_PATH
from osmo_run.backends.harbor.plugins import (
    AGENT_IMPORT_PATH,
    AGENT_RESULT_FILE,
    GRADER_RESULT_FILE,
    RUNNER_MARGIN_SEC,
    VERIFIER_IMPORT_PATH,
)
from osmo_run.backends.harbor.relay import LoopbackRelay, rewrite_url, url_target
from osmo_run.backends.harbor.results import trial_to_result
from osmo_run.backends.harbor.runtime import stage_runtime, stage_user_code
from osmo_run.errors import EnvironmentNotReady, InputError, TaskDirError
from osmo_run.sdk._imports import import_path_of
from osmo_run.sdk._rollout import ResultCallback, grader_skip_reason
from osmo_run.sdk._sandbox import API_KEY_ENV, grader_input, result_from_json, workflow_input
from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.types import (
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    Phase,
    RolloutStatus,
)
from osmo_run.sdk.workflow import AgentWorkflow, Grader

TASK_METADATA_KEY = "harbor_task"
"""A row's metadata key naming its task directory, relative to ``tasks_root``."""

_PHASES = {
    TrialEvent.START: "starting",
    TrialEvent.ENVIRONMENT_START: "environment",
    TrialEvent.AGENT_START: "agent",
    TrialEvent.VERIFICATION_START: "verifier",
}


def check_task_dir(task_dir: Path) -> list[str]:
    """Every problem that makes ``task_dir`` unusable as a Harbor task (empty if none),
    each a short phrase; callers name the directory once."""
    if not task_dir.is_dir():
        return ["task directory not found"]
    problems = []
    if not (task_dir / "instruction.md").is_file():
        problems.append("no instruction.md (a Harbor task needs one)")
    if not (task_dir / "task.toml").is_file():
        return ["no task.toml (a Harbor task needs one)", *problems]
    try:
        has_image = docker_ops.task_base_image(task_dir) is not None
    except TaskDirError as exc:
        return [*problems, str(exc)]
    if not has_image and not (task_dir / "environment" / "Dockerfile").is_file():
        problems.append(
            "neither [environment].docker_image in task.toml nor environment/Dockerfile, "
            "so the trial has no image"
        )
    return problems


def environment_config(
    env: str, import_path: str | None, kwargs: dict[str, Any]
) -> EnvironmentConfig:
    """Harbor's ``EnvironmentConfig`` for an environment type name or a custom class path.

    Raises :class:`InputError` for a type Harbor does not know, listing the known ones.
    """
    if import_path:
        return EnvironmentConfig(import_path=import_path, kwargs=kwargs)
    try:
        kind = EnvironmentType(env)
    except ValueError:
        known = ", ".join(sorted(t.value for t in EnvironmentType))
        raise InputError(f"--env: {env!r} is not a Harbor environment ({known})") from None
    return EnvironmentConfig(type=kind, kwargs=kwargs)


def _slug(text: str, length: int = 24) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-")[:length] or "row"


def _is_loopback(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class _Pending:
    request: ExecutionRequest
    trial_dir: Path
    on_workflow_complete: ResultCallback
    on_grader_complete: ResultCallback | None
    grading: str
    submitted_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    workflow_reported: bool = False


class HarborBackend(ExecutionBackend):
    """Run each row in its own Harbor trial environment.

    ``orchestrator`` is Harbor's ``TrialQueue`` (one with ``n_concurrent`` =
    ``workflow_config.concurrency.max_concurrent`` is made when omitted). ``task_dir`` is the
    task every row runs in unless its metadata names another under ``tasks_root``.
    ``user_code_dir`` is copied into each trial (or into the prebuilt image) and put on the
    runner's import path. ``environment_config`` is Harbor's ``EnvironmentConfig`` (type,
    import path, kwargs). ``prebuild_local_image`` builds the task image with the runtime and
    code once per run (Docker only). ``cleanup_successful_trials`` removes the trial
    directories of successful rows; failed ones are kept for debugging.

    Raises :class:`~osmo_run.errors.InputError` for unusable arguments.
    """

    cancel_grace_sec = 60.0

    def __init__(
        self,
        orchestrator: TrialQueue | None = None,
        task_dir: Path | None = None,
        user_code_dir: Path | None = None,
        workflow: Any = None,
        workflow_config: AgentWorkflowConfig | None = None,
        grader: Any = None,
        grader_config: GraderConfig | None = None,
        environment_config: EnvironmentConfig | None = None,
        prebuild_local_image: bool = True,
        cleanup_successful_trials: bool = True,
        *,
        trials_dir: Path | None = None,
        tasks_root: Path | None = None,
        llm: LLMEndpoint | None = None,
        llm_api_key_env: str | None = None,
        run_id: str | None = None,
    ) -> None:
        if workflow is None:
            raise InputError("HarborBackend needs a workflow")
        if task_dir is None and tasks_root is None:
            raise InputError("HarborBackend needs --task-dir (or a tasks root for per-row tasks)")
        self._workflow_path = import_path_of(
            workflow, AgentWorkflow, "workflow", tolerate_missing_deps=True
        )
        self._grader_path = (
            None
            if grader is None
            else import_path_of(grader, Grader, "grader", tolerate_missing_deps=True)
        )
        self._workflow_config = workflow_config or AgentWorkflowConfig()
        self._grader_config = grader_config or GraderConfig()
        self._task_dir = task_dir.resolve() if task_dir else None
        self._tasks_root = tasks_root.resolve() if tasks_root else None
        self._user_code_dir = (user_code_dir or Path.cwd()).resolve()
        self._environment = environment_config or EnvironmentConfig(type=EnvironmentType.DOCKER)
        self._is_docker = (
            self._environment.import_path is None
            and (self._environment.type or EnvironmentType.DOCKER) is EnvironmentType.DOCKER
        )
        self._prebuild = prebuild_local_image and self._is_docker
        self.prebuild_skipped_reason = (
            None
            if self._prebuild or not prebuild_local_image
            else "prebuild applies to the local docker environment only"
        )
        self._cleanup = cleanup_successful_trials
        self._run_id = run_id or "adhoc"
        self._invocation = uuid.uuid4().hex[:8]
        self._trials_dir = (trials_dir or Path("runs") / "trials").resolve()
        self._llm = llm
        self._llm_api_key_env = llm_api_key_env
        self._queue = orchestrator or TrialQueue(
            n_concurrent=self._workflow_config.concurrency.max_concurrent
        )
        self._max_concurrency = int(getattr(self._queue, "_n_concurrent", 0))
        self._pending: dict[str, _Pending] = {}
        self._seq = 0
        self._started = 0
        self._ended = 0
        self._images: dict[Path, str] = {}
        self._prepare_lock = asyncio.Lock()
        self._prepared = False
        self._staging: Path | None = None
        self._compose_overlay: Path | None = None
        self._relay: LoopbackRelay | None = None
        self._container_llm_url = llm.base_url if llm else None
        for event in TrialEvent:
            self._queue.add_hook(event, self._on_event)

    # -- ExecutionBackend -------------------------------------------------------------

    @property
    def max_concurrency(self) -> int:
        return self._max_concurrency

    @property
    def run_id(self) -> str:
        return self._run_id

    def health(self) -> dict[str, Any]:
        submitted = len(self._pending)
        running = self._started - self._ended
        return {
            "status": "ok",
            "backend": "harbor",
            "environment": self._environment.import_path
            or (self._environment.type or EnvironmentType.DOCKER).value,
            "queued": max(submitted - running, 0),
            "running": running,
            "max_concurrency": self._max_concurrency,
            "run_id": self._run_id,
            "invocation": self._invocation,
        }

    async def prepare(self) -> None:
        """Check the environment and build what every trial shares, before any row runs.

        Raises :class:`EnvironmentNotReady` (no engine, missing credentials, an
        unreachable model endpoint) or :class:`TaskDirError`.
        """
        async with self._prepare_lock:
            if self._prepared:
                return
            if self._is_docker:
                await docker_ops.engine_ready()
            else:
                self._preflight()
            await self._make_llm_reachable()
            if self._task_dir is not None:
                problems = check_task_dir(self._task_dir)
                if problems:
                    raise TaskDirError(f"--task-dir {self._task_dir}: " + "; ".join(problems))
            self._trials_dir.mkdir(parents=True, exist_ok=True)
            self._staging = Path(tempfile.mkdtemp(prefix=f"osmo-run-{self._invocation}-"))
            stage_runtime(self._staging / "runtime")
            stage_user_code(self._user_code_dir, self._staging / "code")
            (self._staging / "inputs").mkdir()
            if self._is_docker:
                self._compose_overlay = self._staging / "run-labels.compose.yaml"
                self._compose_overlay.write_text(
                    docker_ops.labels_overlay(self._run_id, self._invocation), encoding="utf-8"
                )
                # Reconcile: containers an earlier, killed invocation of this run left.
                await docker_ops.remove_labelled(f"{docker_ops.RUN_LABEL}={self._run_id}")
            if self._prebuild and self._task_dir is not None:
                try:
                    await self._image_for(self._task_dir)
                except docker_ops.DockerCommandError as exc:
                    raise EnvironmentNotReady(
                        f"--task-dir {self._task_dir}: building the trial image failed: {exc}"
                    ) from None
            self._prepared = True

    async def aclose(self) -> None:
        """Remove what the run left: its containers (by label), networks and staging."""
        if self._is_docker and self._prepared:
            await docker_ops.remove_labelled(f"{docker_ops.INVOCATION_LABEL}={self._invocation}")
            try:
                await docker_ops.engine_ready()
            except EnvironmentNotReady:
                print(
                    "warning: the container engine did not answer when the run ended, so its "
                    "containers may remain; once it is back, run `osmo-run cleanup "
                    f"{self._trials_dir.parent}`",
                    file=sys.stderr,
                )
        if self._relay is not None:
            await self._relay.close()
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)

    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None:
        await self.prepare()
        self._seq += 1
        trial_name = f"osmo-{self._invocation}-{self._seq:05d}-{_slug(request.id)}"
        try:
            task_dir = self._task_for(request)
            config, grading = await self._trial_config(request, trial_name, task_dir)
        except (InputError, docker_ops.DockerCommandError) as exc:
            category = (
                ErrorCategory.VALIDATION_ERROR
                if isinstance(exc, InputError)
                else ErrorCategory.INFRA_ERROR
            )
            on_workflow_complete(_setup_failure(request.id, category, str(exc)))
            return
        pending = _Pending(
            request=request,
            trial_dir=self._trials_dir / trial_name,
            on_workflow_complete=on_workflow_complete,
            on_grader_complete=on_grader_complete,
            grading=grading,
        )
        self._pending[trial_name] = pending
        try:
            trial = await self._queue.submit(config)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._deliver(
                pending,
                _setup_failure(
                    request.id,
                    ErrorCategory.INFRA_ERROR,
                    f"Harbor could not start the trial: {type(exc).__name__}: {exc}",
                ),
            )
            return
        finally:
            self._pending.pop(trial_name, None)
            self._remove_inputs(trial_name)
        self._finish(pending, trial_name, trial)

    # -- per trial ------------------------------------------------------------------------

    def _task_for(self, request: ExecutionRequest) -> Path:
        name = request.metadata.get(TASK_METADATA_KEY)
        if name is None:
            if self._task_dir is None:
                raise InputError(
                    f"row {request.id}: no --task-dir and no metadata.{TASK_METADATA_KEY}"
                )
            return self._task_dir
        root = self._tasks_root or (self._task_dir.parent if self._task_dir else None)
        if root is None or not isinstance(name, str):
            raise InputError(f"row {request.id}: metadata.{TASK_METADATA_KEY} must be a string")
        task_dir = (root / name).resolve()
        if not task_dir.is_relative_to(root):
            raise InputError(
                f"row {request.id}: metadata.{TASK_METADATA_KEY} {name!r} leaves the tasks "
                f"directory {root}"
            )
        problems = check_task_dir(task_dir)
        if problems:
            raise InputError(
                f"row {request.id}: metadata.{TASK_METADATA_KEY} {name!r} ({task_dir}): "
                + "; ".join(problems)
            )
        return task_dir

    async def _image_for(self, task_dir: Path) -> str:
        if task_dir not in self._images:
            assert self._staging is not None
            self._images[task_dir] = await docker_ops.prebuild_image(
                task_dir, self._staging / "runtime", self._staging / "code"
            )
        return self._images[task_dir]

    async def _trial_config(
        self, request: ExecutionRequest, trial_name: str, task_dir: Path
    ) -> tuple[TrialConfig, str]:
        assert self._staging is not None
        inputs = self._staging / "inputs" / trial_name
        inputs.mkdir(parents=True, exist_ok=True)
        workflow_input_file = inputs / "workflow.json"
        spec = workflow_input(
            request, self._workflow_path, self._workflow_config, self._llm, self._container_llm_url
        )
        workflow_input_file.write_text(json.dumps(spec), encoding="utf-8")

        environment = self._environment.model_copy(deep=True)
        prebuilt = self._prebuild
        if self._is_docker:
            assert self._compose_overlay is not None
            environment.extra_docker_compose = [
                *environment.extra_docker_compose,
                self._compose_overlay,
            ]
            if prebuilt:
                async with self._prepare_lock:
                    image = await self._image_for(task_dir)
                environment.import_path = PREBUILT_IMAGE_IMPORT_PATH
                environment.type = None
                environment.kwargs = {**environment.kwargs, "image": image}

        agent = AgentConfig(
            import_path=AGENT_IMPORT_PATH,
            kwargs={
                "input_path": str(workflow_input_file),
                "runtime_dir": None if prebuilt else str(self._staging / "runtime"),
                "code_dir": None if prebuilt else str(self._staging / "code"),
                "agent_timeout_sec": request.agent_timeout_sec,
            },
            override_timeout_sec=(
                None
                if request.agent_timeout_sec is None
                else request.agent_timeout_sec + 2 * RUNNER_MARGIN_SEC
            ),
            env=(
                {API_KEY_ENV: "${" + self._llm_api_key_env + "}"} if self._llm_api_key_env else {}
            ),
        )
        verifier, grading = self._verifier_config(request, task_dir, inputs)
        config = TrialConfig(
            task=TaskConfig(path=task_dir),
            trial_name=trial_name,
            trials_dir=self._trials_dir,
            agent=agent,
            environment=environment,
            verifier=verifier,
        )
        return config, grading

    def _verifier_config(
        self, request: ExecutionRequest, task_dir: Path, inputs: Path
    ) -> tuple[VerifierConfig, str]:
        if self._grader_path is None:
            if (task_dir / "tests" / "test.sh").is_file() and request.grade:
                return VerifierConfig(), "task"
            return VerifierConfig(disable=True), "no grader configured"
        skip = grader_skip_reason(request, has_grader=True)
        if skip is not None:
            return VerifierConfig(disable=True), skip
        grader_file = inputs / "grader.json"
        grader_file.write_text(
            json.dumps(grader_input(request, self._grader_path, self._grader_config)),
            encoding="utf-8",
        )
        timeout = request.grader_timeout_sec
        return (
            VerifierConfig(
                import_path=VERIFIER_IMPORT_PATH,
                kwargs={"input_path": str(grader_file), "grader_timeout_sec": timeout},
                override_timeout_sec=None if timeout is None else timeout + 2 * RUNNER_MARGIN_SEC,
            ),
            "osmo",
        )

    async def _on_event(self, event: TrialHookEvent) -> None:
        """Harbor lifecycle hook: progress for the display, and ``on_workflow_complete`` at
        verification start. Never raises (a raising hook would break Harbor's trial)."""
        try:
            pending = self._pending.get(event.trial_name)
            if event.event is TrialEvent.START:
                self._started += 1
                if pending is not None:
                    pending.started_at = time.monotonic()
            elif event.event is TrialEvent.END:
                self._ended += 1
            if pending is None:
                return
            phase = _PHASES.get(event.event)
            if phase is not None:
                self._report_progress(pending.request.id, phase)
            if event.event is TrialEvent.VERIFICATION_START:
                self._report_workflow_done(pending)
        except Exception:  # a display hiccup must not fail the trial
            pass

    def _report_workflow_done(self, pending: _Pending) -> None:
        if pending.on_grader_complete is None or pending.workflow_reported:
            return
        workflow = _read_json(pending.trial_dir / "agent" / AGENT_RESULT_FILE)
        if workflow is None or workflow.get("status") != "success":
            return  # a failed workflow is not graded; its result comes when the trial ends
        if pending.grading not in ("osmo", "task"):
            return
        result = result_from_json(workflow)
        result.status = RolloutStatus.GRADING
        pending.workflow_reported = True
        pending.on_workflow_complete(result)

    def _finish(self, pending: _Pending, trial_name: str, trial: TrialResult) -> None:
        trial_dir = pending.trial_dir
        workflow = _read_json(trial_dir / "agent" / AGENT_RESULT_FILE)
        grader = _read_json(trial_dir / "verifier" / GRADER_RESULT_FILE)
        result = trial_to_result(pending.request.id, trial, workflow, grader, pending.grading)
        result.timings.queued_sec = (
            (pending.started_at - pending.submitted_at) if pending.started_at else 0.0
        )
        result.timings.total_sec = time.monotonic() - pending.submitted_at
        result.extra = {
            "trial_name": trial_name,
            "trial_id": str(trial.id),
            "environment": self.health()["environment"],
        }
        if result.ok and self._cleanup:
            shutil.rmtree(trial_dir, ignore_errors=True)
        else:
            result.extra["trial_dir"] = str(trial_dir)
            with contextlib.suppress(OSError):
                trial_dir.chmod(0o700)  # it holds the conversation: its owner's eyes only
        self._deliver(pending, result)

    def _deliver(self, pending: _Pending, result: ExecutionResult) -> None:
        if pending.workflow_reported and pending.on_grader_complete is not None:
            pending.on_grader_complete(result)
        else:
            pending.on_workflow_complete(result)

    def _remove_inputs(self, trial_name: str) -> None:
        if self._staging is not None:
            shutil.rmtree(self._staging / "inputs" / trial_name, ignore_errors=True)

    # -- checks before any row runs --------------------------------------------------------

    async def _make_llm_reachable(self) -> None:
        """Relay a loopback model endpoint into Docker containers; refuse it elsewhere."""
        if self._llm is None or not _is_loopback(self._llm.base_url):
            return
        if not self._is_docker:
            raise EnvironmentNotReady(
                f"llm.base_url {self._llm.base_url} is a loopback address, which a remote "
                "sandbox cannot reach; serve the model on a public address and set "
                "llm.base_url to it"
            )
        gateway = await docker_ops.bridge_gateway()
        self._relay = LoopbackRelay(*url_target(self._llm.base_url))
        try:
            port = await self._relay.start(gateway)
        except OSError as exc:
            raise EnvironmentNotReady(
                f"llm.base_url {self._llm.base_url} is a loopback address and relaying it "
                f"into containers on {gateway} failed ({exc}); serve the model on an "
                "address containers reach and set llm.base_url to it"
            ) from None
        self._container_llm_url = rewrite_url(self._llm.base_url, gateway, port)

    def _preflight(self) -> None:
        """Harbor's own checks of a non-Docker environment (its extra, its credentials),
        each failure one line."""
        from harbor.environments.factory import EnvironmentFactory

        kind = self._environment.type
        extra = None if self._environment.import_path else _missing_harbor_extra(kind)
        if extra is not None:
            raise EnvironmentNotReady(
                f"--env {kind.value}: Harbor's {extra!r} extra is not installed; "
                f"install it with: pip install 'harbor[{extra}]'"
            )
        try:
            EnvironmentFactory.run_preflight(
                type=kind,
                import_path=self._environment.import_path,
                kwargs=self._environment.kwargs,
            )
        except SystemExit as exc:
            raise EnvironmentNotReady(" ".join(str(exc.code).split())) from None
        except Exception as exc:
            name = self._environment.import_path or (kind.value if kind else "harbor")
            raise EnvironmentNotReady(
                f"the {name} environment is not usable: {' '.join(str(exc).split())}"
            ) from None


def _missing_harbor_extra(kind: EnvironmentType | None) -> str | None:
    """The Harbor extra named like ``kind`` when a package it requires is not installed."""
    if kind is None:
        return None
    try:
        requirements = importlib.metadata.requires("harbor") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    in_extra = re.compile(rf"""extra\s*==\s*['"]{re.escape(kind.value)}['"]""")
    for requirement in requirements:
        spec, _, markers = requirement.partition(";")
        name = re.match(r"[A-Za-z0-9._-]+", spec.strip())
        if not in_extra.search(markers) or name is None or name.group() == "harbor":
            continue
        try:
            importlib.metadata.distribution(name.group())
        except importlib.metadata.PackageNotFoundError:
            return str(kind.value)
    return None


def _setup_failure(rollout_id: str, category: ErrorCategory, message: str) -> ExecutionResult:
    return ExecutionResult(
        rollout_id=rollout_id,
        status=RolloutStatus.FAILURE,
        error_category=category,
        error_message=message,
        error_phase=Phase.SETUP,
    )


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
