"""HarborBackend: every row runs as its own Harbor trial.

Per row: a trial from the row's task directory (:mod:`.trial_config`); osmo-run's agent
plugin runs the workflow inside the environment through the sandbox runner; osmo-run's
verifier plugin runs the grader there (or the task's own ``tests/test.sh`` when no grader
is configured); results come back as files in the trial directory and are mapped by
:mod:`.results`. This module owns the queue, Harbor's lifecycle hooks and result delivery;
the checks before any row runs are in :mod:`.preflight`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harbor.models.environment_type import EnvironmentType
from harbor.models.trial.config import EnvironmentConfig
from harbor.models.trial.result import TrialResult
from harbor.trial.hooks import TrialEvent, TrialHookEvent
from harbor.trial.queue import TrialQueue

from osmo_run.backends.base import ExecutionBackend, ResultCallback, deliver
from osmo_run.backends.harbor import docker as docker_ops
from osmo_run.backends.harbor.cleanup import (
    forget_staging,
    record_staging,
    remove_unreferenced_trial_dirs,
)
from osmo_run.backends.harbor.cleanup import remove_staging as remove_recorded_staging
from osmo_run.backends.harbor.plugins import (
    AGENT_RESULT_FILE,
    GRADER_RESULT_FILE,
    SETUP_TIMINGS_FILE,
)
from osmo_run.backends.harbor.preflight import (
    check_environment,
    check_image_python,
    check_task_dir,
    environment_name,
    is_local_docker,
    task_for_row,
)
from osmo_run.backends.harbor.relay import (
    ModelGateway,
    is_loopback,
    reach_from_trials,
    rewrite_url,
    start_relay,
    url_target,
)
from osmo_run.backends.harbor.remote_probes import PREFLIGHT_TIMEOUT_SEC
from osmo_run.backends.harbor.requirements import (
    RequirementOptions,
    RequirementSet,
    collect_requirements,
)
from osmo_run.backends.harbor.results import trial_to_result
from osmo_run.backends.harbor.runtime import (
    StagedCode,
    make_staging,
    remove_staging,
    stage_runtime,
    stage_user_code,
    sweep_stale_staging,
)
from osmo_run.backends.harbor.trial_config import (
    OSMO_GRADES,
    TASK_GRADES,
    RequestEndpoint,
    TrialSetup,
    trial_config,
)
from osmo_run.backends.harbor.wheelhouse import installed_site, target_python
from osmo_run.errors import (
    DockerCommandError,
    EnvironmentNotReady,
    InputError,
    SpecError,
    TaskDirError,
)
from osmo_run.run.writing.runlock import held_by_another
from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.deadlines import HARBOR_INTERRUPT_GRACE_SEC
from osmo_run.sdk.imports import import_path_of
from osmo_run.sdk.model_layer import current_model_layer
from osmo_run.sdk.names import docker_part
from osmo_run.sdk.types import (
    BackendDetails,
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    RolloutStatus,
)
from osmo_run.sdk.workflow import AgentWorkflow, Grader

MODEL_CALLS_PER_TRIAL = 64
"""Model calls one trial may have in flight under an adaptive limit that the endpoint never
throttles (the ceiling of the run's limits is this times the trials run at once)."""


class TrialPhase(enum.StrEnum):
    """Where a row's trial is, as the live display shows it (Harbor's lifecycle events)."""

    STARTING = "starting"
    """The trial was created."""
    ENVIRONMENT = "environment"
    """The trial's environment is starting."""
    AGENT = "agent"
    """The workflow runs inside the trial."""
    VERIFIER = "verifier"
    """The grader (or the task's tests) runs inside the trial."""


_PHASES = {
    TrialEvent.START: TrialPhase.STARTING,
    TrialEvent.ENVIRONMENT_START: TrialPhase.ENVIRONMENT,
    TrialEvent.AGENT_START: TrialPhase.AGENT,
    TrialEvent.VERIFICATION_START: TrialPhase.VERIFIER,
}


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
    ``workflow_config.concurrency.max_concurrent`` is made when omitted). osmo-run owns that
    number: :attr:`max_concurrency` (the runner's window) is always
    ``workflow_config.concurrency.max_concurrent``, never read back from a queue (Harbor
    keeps it private), so give a queue of your own the same ``n_concurrent``. ``task_dir`` is the
    task every row runs in unless its metadata names another under ``tasks_root``.
    ``user_code_dir`` is copied into each trial (or into the prebuilt image) and put on the
    runner's import path. ``environment_config`` is Harbor's ``EnvironmentConfig`` (type,
    import path, kwargs). ``prebuild_local_image`` builds the task image with the runtime and
    code once per run (Docker only). ``cleanup_successful_trials`` removes the trial
    directories of successful rows; failed ones are kept for debugging. ``requirements``:
    what trials install beyond the image (:mod:`.requirements`; default: the code dir's),
    resolved before any row and baked into the prebuilt image or uploaded at setup.
    ``preflight_timeout_sec`` bounds the one API call that checks a remote environment
    before any row runs (:mod:`.remote_probes`). ``code_include``: globs of files staged
    from ``user_code_dir`` although dot-files or secret-looking (:mod:`.runtime`);
    ``secrets``: values (API keys) no staged file may hold; ``never_staged`` (the
    dataset, the run's directory and files) and ``trials_dir`` are never staged, even
    inside ``user_code_dir``. :meth:`setup_note` says what was staged. ``results_path``:
    the run's results file, given when ``trials_dir`` is the run's own; the trial
    directories none of its rows points at (an earlier, killed invocation's) are removed
    before any row runs. ``run_dir``: where the staging copy is noted, so that a later
    invocation of the run (``--resume``) or ``osmo-run cleanup`` removes it after a
    ``kill -9`` (default: the parent of ``trials_dir``). ``run_lock`` is the lock file
    this invocation holds (:mod:`osmo_run.run.writing.runlock`): its containers carry it, so no
    other run's sweep removes them while it lives.

    Raises :class:`~osmo_run.errors.InputError` for unusable arguments.
    """

    cancel_grace_sec = HARBOR_INTERRUPT_GRACE_SEC
    progress_phases: tuple[str, ...] = tuple(TrialPhase)

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
        judge: LLMEndpoint | None = None,
        judge_api_key_env: str | None = None,
        run_id: str | None = None,
        requirements: RequirementOptions | None = None,
        preflight_timeout_sec: float = PREFLIGHT_TIMEOUT_SEC,
        code_include: tuple[str, ...] = (),
        secrets: tuple[str, ...] = (),
        never_staged: tuple[Path, ...] = (),
        results_path: Path | None = None,
        run_dir: Path | None = None,
        run_lock: Path | None = None,
    ) -> None:
        if workflow is None:
            raise InputError("HarborBackend needs a workflow")
        if task_dir is None and tasks_root is None:
            raise InputError("HarborBackend needs --task-dir (or a tasks root for per-row tasks)")
        self._workflow_path, self._grader_path = _import_paths(workflow, grader)
        self._workflow_config = workflow_config or AgentWorkflowConfig()
        self._grader_config = grader_config or GraderConfig()
        self._task_dir = task_dir.resolve() if task_dir else None
        self._tasks_root = tasks_root.resolve() if tasks_root else None
        self._user_code_dir = (user_code_dir or Path.cwd()).resolve()
        self._code_include = code_include
        self._secrets = secrets
        self._never_staged = never_staged
        self._staged: StagedCode | None = None
        self._environment = environment_config or EnvironmentConfig(type=EnvironmentType.DOCKER)
        self._is_docker = is_local_docker(self._environment)
        self._prebuild = prebuild_local_image and self._is_docker
        self._cleanup = cleanup_successful_trials
        self._preflight_timeout_sec = preflight_timeout_sec
        self._results_path = results_path
        self._run_id = run_id or "adhoc"
        self._run_lock = run_lock
        self._invocation = uuid.uuid4().hex[:8]
        self._trials_dir = (trials_dir or Path("runs") / "trials").resolve()
        self._run_dir = (run_dir or self._trials_dir.parent).resolve()
        self._llm = llm
        self._llm_api_key_env = llm_api_key_env
        self._judge = judge
        self._judge_api_key_env = judge_api_key_env
        self._max_concurrency = self._workflow_config.concurrency.max_concurrent
        self._queue = orchestrator or TrialQueue(n_concurrent=self._max_concurrency)
        self._pending: dict[str, _Pending] = {}
        self._seq = self._started = self._ended = 0
        self._images: dict[Path, str] = {}
        self._requirement_options = requirements or RequirementOptions()
        self._requirements = RequirementSet()
        self._sites: dict[Path, Path | None] = {}
        # What failed for a task, raised again for each of its rows: a per-row task
        # (metadata.harbor_task) fails the same way every time, and trying again would
        # hold the lock (and every other row) for another pull, build or pip run.
        self._site_failures: dict[Path, InputError | DockerCommandError] = {}
        self._image_failures: dict[Path, InputError | DockerCommandError] = {}
        self._python_checked: dict[Path, TaskDirError | DockerCommandError | None] = {}
        self._prepare_lock = asyncio.Lock()
        self._image_lock = asyncio.Lock()
        self._site_lock = asyncio.Lock()
        self._python_lock = asyncio.Lock()
        self._setup: TrialSetup | None = None
        self._relays: list[ModelGateway] = []
        # (host, port) of a loopback endpoint -> (gateway, port) of its relay: one per
        # endpoint per run, the spec's and every served request's
        self._relayed: dict[tuple[str, int], tuple[str, int]] = {}
        self._relay_lock = asyncio.Lock()
        for event in TrialEvent:
            self._queue.add_hook(event, self._on_event)

    # -- ExecutionBackend -------------------------------------------------------------

    @property
    def max_concurrency(self) -> int:
        return self._max_concurrency

    @property
    def model_calls_ceiling(self) -> int:
        """A trial may make many model calls at once (an agent's parallel tools): the
        adaptive limit of the run's endpoints may grow to :data:`MODEL_CALLS_PER_TRIAL`
        calls per trial in flight, where the endpoint takes them."""
        return self._max_concurrency * MODEL_CALLS_PER_TRIAL

    def health(self) -> dict[str, Any]:
        submitted = len(self._pending)
        running = self._started - self._ended
        return {
            "status": "ok",
            "backend": "harbor",
            "environment": environment_name(self._environment),
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
            if self._setup is not None:
                return
            self._check_budget_is_counted()  # before anything is asked of the environment
            await check_environment(self._environment, self._preflight_timeout_sec)
            llm_url, judge_url = await self._reach_endpoints()
            if self._task_dir is not None:
                problems = check_task_dir(self._task_dir, self._grader_path is not None)
                if problems:
                    raise TaskDirError(f"--task-dir {self._task_dir}: " + "; ".join(problems))
            await self._resolve_requirements()  # before anything is written or started
            if self._task_dir is not None:
                try:
                    await self._check_python(self._task_dir)
                except TaskDirError as exc:
                    raise TaskDirError(f"--task-dir {self._task_dir}: {exc}") from None
                except DockerCommandError as exc:
                    raise EnvironmentNotReady(
                        f"--task-dir {self._task_dir}: preparing the trial image failed: {exc}"
                    ) from None
            self._trials_dir.mkdir(parents=True, exist_ok=True)
            sweep_stale_staging()  # what killed runs left (a kill leaves no time to clean)
            # what an earlier invocation of this run, killed, left: its staging copy (with
            # the code dir's .env) and the trial directories no result row keeps
            self._run_dir.mkdir(parents=True, exist_ok=True)
            remove_recorded_staging(self._run_dir, self._run_id, keep=self._invocation)
            if self._results_path is not None:
                remove_unreferenced_trial_dirs(self._trials_dir, self._results_path)
            staging = make_staging(self._invocation)
            record_staging(self._run_dir, self._run_id, self._invocation, staging)
            try:
                await self._stage_and_build(staging, llm_url, judge_url)
            except BaseException:  # a refusal, a failed build, Ctrl-C: no copy survives
                self._setup = None
                remove_staging(staging)
                forget_staging(self._run_dir, self._invocation)
                raise

    def _check_budget_is_counted(self) -> None:
        """Refuse a run budget (the model layer current while preparing) that the trials'
        calls could escape: only calls to a loopback endpoint from local Docker trials pass
        through the run's model gateway, where they are counted. It fails closed, never
        open. Raises :class:`SpecError`."""
        layer = current_model_layer()
        if layer is None or layer.budget is None:
            return
        if not self._is_docker:
            raise SpecError(
                f"budget: trials in the {environment_name(self._environment)} environment "
                "call their model from a remote sandbox, not through this machine, so a budget "
                "could not count their calls; remove budget (and --budget-tokens, "
                "--budget-usd) or run the trials in local Docker"
            )
        for section, endpoint in (("llm", self._llm), ("judge", self._judge)):
            if endpoint is not None and not is_loopback(endpoint.base_url):
                raise SpecError(
                    f"budget: {section}.base_url {endpoint.base_url} is not on this machine: "
                    "trials call it directly, not through the run's model gateway, so a "
                    "budget could not count their calls; remove budget (and "
                    "--budget-tokens, --budget-usd) or serve the model on this machine"
                )

    async def _stage_and_build(
        self, staging: Path, llm_url: str | None, judge_url: str | None
    ) -> None:
        """Stage the runtime and the code under ``staging``, then build the prebuilt image
        (see :meth:`prepare`, which removes ``staging`` when this raises)."""
        stage_runtime(staging / "runtime")
        self._staged = stage_user_code(
            self._user_code_dir,
            staging / "code",
            self._code_include,
            self._secrets,
            skip=(self._trials_dir, *self._never_staged),
        )
        (staging / "inputs").mkdir()
        self._setup = TrialSetup(
            workflow_path=self._workflow_path,
            grader_path=self._grader_path,
            workflow_config=self._workflow_config,
            grader_config=self._grader_config,
            environment=self._environment,
            staging=staging,
            trials_dir=self._trials_dir,
            llm=self._llm,
            llm_url=llm_url,
            llm_api_key_env=self._llm_api_key_env,
            judge=self._judge,
            judge_url=judge_url,
            judge_api_key_env=self._judge_api_key_env,
            compose_overlay=await self._label_containers(staging),
        )
        if self._prebuild and self._task_dir is not None:
            try:
                await self._image_for(self._task_dir)
            except DockerCommandError as exc:
                raise EnvironmentNotReady(
                    f"--task-dir {self._task_dir}: building the trial image failed: {exc}"
                ) from None

    def setup_note(self) -> str:
        return self._staged.describe() if self._staged is not None else ""

    async def _reach_endpoints(self) -> tuple[str | None, str | None]:
        """The model's and the judge's base URLs as trial containers reach them, relaying
        a loopback one (once when both are the same server)."""
        layer = current_model_layer()
        llm_url, relay = await reach_from_trials(self._llm, self._is_docker, "llm", layer)
        self._keep_relay(self._llm, llm_url, relay)
        judge = self._judge
        if judge is not None and self._llm is not None and judge.base_url == self._llm.base_url:
            return llm_url, llm_url
        judge_url, relay = await reach_from_trials(judge, self._is_docker, "judge", layer)
        self._keep_relay(judge, judge_url, relay)
        return llm_url, judge_url

    def _keep_relay(
        self, endpoint: LLMEndpoint | None, url: str | None, relay: ModelGateway | None
    ) -> None:
        """Note ``relay`` (started for ``endpoint``, reached at ``url``) for the run's end,
        and for the requests whose endpoint is on the same server."""
        if relay is None or endpoint is None or url is None:
            return
        self._relays.append(relay)
        self._relayed[url_target(endpoint.base_url)] = url_target(url)

    async def _request_endpoint(self, seq: int, llm: LLMEndpoint) -> RequestEndpoint:
        """Where the trial number ``seq`` reaches its request's own endpoint ``llm``: a
        loopback one through the run's relay to that server (started by the first request
        that needs it), and the name of the variable that holds its key while the trial
        lives (see :meth:`execute`).

        Raises :class:`InputError` for a loopback endpoint with a remote environment or a
        port that cannot be, and :class:`EnvironmentNotReady` when its relay cannot start.
        """
        key_env = None
        if llm.api_key:
            key_env = f"OSMO_RUN_ROLLOUT_KEY_{self._invocation}_{seq:05d}"
        if not is_loopback(llm.base_url):
            return RequestEndpoint(llm.base_url, key_env)
        if not self._is_docker:
            raise InputError(
                f"chat_completions_url {llm.base_url} is a loopback address (this machine), "
                "which a remote sandbox cannot reach; give an address the sandbox reaches"
            )
        try:
            target = url_target(llm.base_url)
        except ValueError as exc:  # a port out of range, or not a number
            raise InputError(f"chat_completions_url {llm.base_url}: {exc}") from None
        async with self._relay_lock:  # rollouts of one new endpoint start one relay
            if target not in self._relayed:
                relay, gateway, port = await start_relay(
                    llm.base_url, "chat_completions_url", current_model_layer()
                )
                self._relays.append(relay)
                self._relayed[target] = (gateway, port)
        return RequestEndpoint(rewrite_url(llm.base_url, *self._relayed[target]), key_env)

    async def _label_containers(self, staging: Path) -> Path | None:
        """The compose overlay labelling this run's Docker containers, after removing what
        an earlier, killed invocation of the same run left (``None`` off Docker). A live
        run with the same id (the same spec and data, another ``--output``) keeps its
        containers: its lock file is held."""
        if not self._is_docker:
            return None
        overlay = staging / "run-labels.compose.yaml"
        overlay.write_text(
            docker_ops.labels_overlay(self._run_id, self._invocation, self._run_lock),
            encoding="utf-8",
        )
        own = str(self._run_lock)

        def live_elsewhere(lock_file: str) -> bool:
            return lock_file != own and held_by_another(Path(lock_file))

        await docker_ops.remove_labelled(
            f"{docker_ops.RUN_LABEL}={self._run_id}", keep=live_elsewhere
        )
        return overlay

    async def aclose(self) -> None:
        """Remove what the run left: its containers (by label), networks and staging."""
        if self._is_docker and self._setup is not None:
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
        for relay in self._relays:
            await relay.close()
        if self._setup is not None:
            remove_staging(self._setup.staging)
            forget_staging(self._run_dir, self._invocation)

    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None:
        await self.prepare()
        assert self._setup is not None
        self._seq += 1
        seq = self._seq
        # A Compose project and container name (<= 63 characters, [a-z0-9-]): unique by the
        # invocation and sequence number, readable by the row's safe name, never its raw id.
        trial_name = f"osmo-{self._invocation}-{seq:05d}-{docker_part(request.safe_name)}"
        try:
            task_dir = task_for_row(
                request, self._task_dir, self._tasks_root, self._grader_path is not None
            )
            await self._check_python(task_dir)
            image = await self._image_for(task_dir) if self._prebuild else None
            site = None if self._prebuild else await self._site_for(task_dir)
            own = None
            if request.llm is not None:
                own = await self._request_endpoint(seq, request.llm)
            config, grading = trial_config(
                self._setup, request, trial_name, task_dir, image, site, own
            )
        except (InputError, DockerCommandError, EnvironmentNotReady) as exc:
            category = (
                ErrorCategory.VALIDATION_ERROR
                if isinstance(exc, InputError)
                else ErrorCategory.INFRA_ERROR
            )
            failed = ExecutionResult.failure(request.id, category, str(exc))
            if (awaiting := deliver(on_workflow_complete, failed)) is not None:
                await awaiting
            return
        pending = _Pending(
            request=request,
            trial_dir=self._trials_dir / trial_name,
            on_workflow_complete=on_workflow_complete,
            on_grader_complete=on_grader_complete,
            grading=grading,
        )
        self._pending[trial_name] = pending
        key_env = own.key_env if own is not None else None
        if key_env is not None and request.llm is not None and request.llm.api_key:
            # Harbor fills the agent's ${key_env} from this process's environment when
            # it starts the trial; the value is in no file, and gone when the trial ends
            os.environ[key_env] = request.llm.api_key
        try:
            trial = await self._queue.submit(config)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = f"Harbor could not start the trial: {type(exc).__name__}: {exc}"
            result = ExecutionResult.failure(request.id, ErrorCategory.INFRA_ERROR, message)
        else:
            result = self._finish(pending, trial_name, trial)
        finally:
            if key_env is not None:
                os.environ.pop(key_env, None)
            self._pending.pop(trial_name, None)
            shutil.rmtree(self._setup.inputs_dir(trial_name), ignore_errors=True)
        await self._deliver(pending, result)

    # -- per trial ------------------------------------------------------------------------

    async def _resolve_requirements(self) -> None:
        """Collect the workflow's requirements and install them for the main task's image
        (:class:`~osmo_run.errors.RequirementsError`: one line, before any trial)."""
        self._requirements = collect_requirements(
            self._user_code_dir,
            self._requirement_options,
            [p for p in (self._workflow_path, self._grader_path) if p],
        )
        if self._task_dir is not None:
            try:
                await self._site_for(self._task_dir)
            except DockerCommandError as exc:
                raise EnvironmentNotReady(
                    f"--task-dir {self._task_dir}: preparing the trial image failed: {exc}"
                ) from None

    async def _check_python(self, task_dir: Path) -> None:
        """Raise :class:`TaskDirError` unless ``task_dir``'s image (local Docker only: a
        remote one cannot be asked) has the python3 the runner needs, and
        :class:`DockerCommandError` when the image cannot be had; asked once per task per
        run (and once per image id, on disk), a failure raised again for each row."""
        if not self._is_docker:
            return
        if task_dir not in self._python_checked:
            async with self._python_lock:  # rows of one task wait for one probe
                if task_dir not in self._python_checked:
                    try:
                        await check_image_python(await docker_ops.task_image(task_dir))
                        self._python_checked[task_dir] = None
                    except (TaskDirError, DockerCommandError) as exc:  # a pull failed too
                        self._python_checked[task_dir] = exc
        failure = self._python_checked[task_dir]
        if failure is not None:
            raise failure.with_traceback(None)

    async def _site_for(self, task_dir: Path) -> Path | None:
        """The workflow's requirements installed for ``task_dir``'s image (an archive), or
        ``None`` when there are none; once per task per run, a failure included.

        Raises :class:`~osmo_run.errors.RequirementsError` (one line naming the
        requirement) when they cannot be fetched for that image, and
        :class:`~osmo_run.errors.DockerCommandError` when the image cannot be had; the
        same exception again for every later row of that task.
        """
        if not self._requirements.requirements:
            return None
        if task_dir in self._sites:  # the common case needs no lock
            return self._sites[task_dir]
        _raise_if_failed(self._site_failures, task_dir)
        async with self._site_lock:
            if task_dir in self._sites:
                return self._sites[task_dir]
            _raise_if_failed(self._site_failures, task_dir)
            try:
                image = await docker_ops.task_image(task_dir) if self._is_docker else None
                target = await target_python(
                    image, self._requirement_options, environment_name(self._environment)
                )
                self._sites[task_dir] = await installed_site(self._requirements, target)
            except (InputError, DockerCommandError) as exc:
                self._site_failures[task_dir] = exc
                raise
            return self._sites[task_dir]

    async def _image_for(self, task_dir: Path) -> str:
        """The prebuilt image of ``task_dir``, built once per run (trials wait for it); a
        failure is raised again for every later row of that task (see :meth:`_site_for`)."""
        assert self._setup is not None
        if task_dir in self._images:
            return self._images[task_dir]
        _raise_if_failed(self._image_failures, task_dir)
        async with self._image_lock:
            _raise_if_failed(self._image_failures, task_dir)
            if task_dir not in self._images:
                try:
                    self._images[task_dir] = await docker_ops.prebuild_image(
                        task_dir,
                        self._setup.staging / "runtime",
                        self._setup.staging / "code",
                        await self._site_for(task_dir),
                    )
                except (InputError, DockerCommandError) as exc:
                    self._image_failures[task_dir] = exc
                    raise
        return self._images[task_dir]

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
                await self._report_workflow_done(pending)
        except Exception:  # a display hiccup (or a callback's bug) must not fail the trial
            pass

    async def _report_workflow_done(self, pending: _Pending) -> None:
        """``on_workflow_complete`` with the workflow's result (status ``GRADING``) when the
        trial's verifier starts grading a successful workflow; awaited when async, so the
        grader starts once the caller has taken the result, as on every backend."""
        if pending.on_grader_complete is None or pending.workflow_reported:
            return
        workflow = _read_json(pending.trial_dir / "agent" / AGENT_RESULT_FILE)
        if workflow is None or workflow.get("status") != "success":
            return  # a failed workflow is not graded; its result comes when the trial ends
        if pending.grading not in (OSMO_GRADES, TASK_GRADES):
            return
        result = ExecutionResult.from_dict(workflow)
        result.status = RolloutStatus.GRADING
        pending.workflow_reported = True
        if (awaiting := deliver(pending.on_workflow_complete, result)) is not None:
            await awaiting

    def _finish(self, pending: _Pending, trial_name: str, trial: TrialResult) -> ExecutionResult:
        """The row's final result from what the trial left; its directory removed when the
        row succeeded (and cleanup is on), else kept and named in ``backend.trial_dir``."""
        trial_dir = pending.trial_dir
        workflow = _read_json(trial_dir / "agent" / AGENT_RESULT_FILE)
        grader = _read_json(trial_dir / "verifier" / GRADER_RESULT_FILE)
        result = trial_to_result(pending.request.id, trial, workflow, grader, pending.grading)
        result.timings.queued_sec = (
            (pending.started_at - pending.submitted_at) if pending.started_at else 0.0
        )
        result.timings.total_sec = time.monotonic() - pending.submitted_at
        setup = _read_json(trial_dir / "agent" / SETUP_TIMINGS_FILE) or {}
        if isinstance(setup.get("dependencies_sec"), int | float):
            result.timings.dependencies_sec = float(setup["dependencies_sec"])
        kept = not (result.ok and self._cleanup)
        result.backend = BackendDetails(
            trial_name=trial_name,
            trial_id=str(trial.id),
            environment=environment_name(self._environment),
            trial_dir=str(trial_dir) if kept else None,
        )
        if not kept:
            shutil.rmtree(trial_dir, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                trial_dir.chmod(0o700)  # it holds the conversation: its owner's eyes only
        return result

    async def _deliver(self, pending: _Pending, result: ExecutionResult) -> None:
        """Hand the row's final result to ``on_grader_complete`` when the workflow's was
        reported (graded rows), else to ``on_workflow_complete``; awaited when async."""
        graded = pending.workflow_reported and pending.on_grader_complete is not None
        callback = pending.on_grader_complete if graded else pending.on_workflow_complete
        assert callback is not None
        if (awaiting := deliver(callback, result)) is not None:
            await awaiting


def _import_paths(workflow: Any, grader: Any) -> tuple[str, str | None]:
    """The workflow's and grader's ``module:Class`` (classes given as objects included);
    a dependency missing here is tolerated: the trial's image may have it."""
    workflow_path = import_path_of(workflow, AgentWorkflow, "workflow", tolerate_missing_deps=True)
    if grader is None:
        return workflow_path, None
    return workflow_path, import_path_of(grader, Grader, "grader", tolerate_missing_deps=True)


def _raise_if_failed(failures: dict[Path, InputError | DockerCommandError], task_dir: Path) -> None:
    """Raise again what failed for ``task_dir`` (its traceback dropped: each row's own
    raise would otherwise add to the one stored)."""
    if (failure := failures.get(task_dir)) is not None:
        raise failure.with_traceback(None)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
