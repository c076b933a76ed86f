"""One request as a Harbor ``TrialConfig``: osmo-run's agent and verifier plugins, their
input files, the environment (prebuilt image, run labels) and every deadline margin.

Pure configuration: nothing here starts a trial; the backend submits what it builds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harbor.models.trial.config import (
    AgentConfig,
    EnvironmentConfig,
    TaskConfig,
    TrialConfig,
    VerifierConfig,
)

from osmo_run.backends.harbor.environment import (
    PREBUILT_IMAGE_IMPORT_PATH,
    SECRET_SAFE_IMPORT_PATH,
)
from osmo_run.backends.harbor.plugins import (
    AGENT_IMPORT_PATH,
    GRADER_ENVIRONMENT_START_SEC,
    VERIFIER_IMPORT_PATH,
)
from osmo_run.backends.harbor.preflight import is_local_docker
from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.deadlines import HARBOR_MARGIN_SEC, with_margin
from osmo_run.sdk.rollout import grader_skip_reason
from osmo_run.sdk.sandbox import API_KEY_ENV, JUDGE_API_KEY_ENV, grader_input, workflow_input
from osmo_run.sdk.types import ExecutionRequest

OSMO_GRADES = "osmo"
"""Grading mode: osmo-run's grader runs in the trial through the verifier plugin."""
TASK_GRADES = "task"
"""Grading mode: the task's own ``tests/test.sh`` writes the reward."""


@dataclass(frozen=True)
class TrialSetup:
    """What every trial of one run shares, fixed once the run is prepared.

    ``staging`` holds ``runtime/`` and ``code/`` (uploaded when no image is prebuilt) and
    ``inputs/<trial>/`` (each trial's input files). ``llm_url`` is the endpoint's base URL
    as containers reach it, ``judge_url`` the judge's (the grader's endpoint).
    ``compose_overlay`` adds the run's labels (Docker only).
    """

    workflow_path: str
    grader_path: str | None
    workflow_config: AgentWorkflowConfig
    grader_config: GraderConfig
    environment: EnvironmentConfig
    staging: Path
    trials_dir: Path
    llm: LLMEndpoint | None = None
    llm_url: str | None = None
    llm_api_key_env: str | None = None
    judge: LLMEndpoint | None = None
    judge_url: str | None = None
    judge_api_key_env: str | None = None
    compose_overlay: Path | None = None

    def inputs_dir(self, trial_name: str) -> Path:
        return self.staging / "inputs" / trial_name


@dataclass(frozen=True)
class RequestEndpoint:
    """A request's own model endpoint (a served rollout's, :attr:`ExecutionRequest.llm`)
    as its trial reaches it: ``url``, its base URL from inside the trial (through the
    run's relay when it is a loopback one), and ``key_env``, the name of the host
    environment variable holding its key while the trial lives (``None``: the request
    has no key, and the trial gets none, never the run's)."""

    url: str
    key_env: str | None = None


def trial_config(
    setup: TrialSetup,
    request: ExecutionRequest,
    trial_name: str,
    task_dir: Path,
    image: str | None,
    site_archive: Path | None = None,
    own_endpoint: RequestEndpoint | None = None,
) -> tuple[TrialConfig, str]:
    """The trial for ``request`` in ``task_dir`` and how it is graded: :data:`OSMO_GRADES`,
    :data:`TASK_GRADES`, or the reason it is not graded. ``image`` is the prebuilt image to
    start from (``None``: the task's own image, with the SDK and code uploaded per trial,
    and ``site_archive``, the workflow's installed requirements, when it has any).
    A request with its own endpoint (``request.llm``) uses it, never the run's endpoint
    or key; ``own_endpoint`` says how the trial reaches it (default: its base URL as
    given, without a key). Writes the trial's input files
    under ``setup.inputs_dir(trial_name)``; no key is in them or in the config (the
    agent's env names a variable Harbor fills in)."""
    inputs = setup.inputs_dir(trial_name)
    inputs.mkdir(parents=True, exist_ok=True)
    workflow_file = inputs / "workflow.json"
    llm: LLMEndpoint | None
    llm_url: str | None
    if request.llm is not None:
        own = own_endpoint or RequestEndpoint(request.llm.base_url)
        llm, llm_url, key_env = request.llm, own.url, own.key_env
    else:
        llm, llm_url, key_env = setup.llm, setup.llm_url, setup.llm_api_key_env
    spec = workflow_input(request, setup.workflow_path, setup.workflow_config, llm, llm_url)
    workflow_file.write_text(json.dumps(spec), encoding="utf-8")
    environment = _environment_config(setup, image)
    uploads = _Uploads(setup, site_archive, image is None)
    verifier, grading = _verifier_config(setup, request, task_dir, inputs, environment, uploads)
    config = TrialConfig(
        task=TaskConfig(path=task_dir),
        trial_name=trial_name,
        trials_dir=setup.trials_dir,
        agent=_agent_config(request, workflow_file, uploads, key_env),
        environment=environment,
        verifier=verifier,
    )
    return config, grading


@dataclass(frozen=True)
class _Uploads:
    """What a trial's environments get uploaded at setup: the runtime and code (when no
    image is prebuilt) and the installed requirements (``None``: none, or in the image)."""

    runtime_dir: str | None
    code_dir: str | None
    site_archive: str | None

    def __init__(self, setup: TrialSetup, site_archive: Path | None, uploads: bool) -> None:
        object.__setattr__(self, "runtime_dir", str(setup.staging / "runtime") if uploads else None)
        object.__setattr__(self, "code_dir", str(setup.staging / "code") if uploads else None)
        archive = str(site_archive) if site_archive is not None and uploads else None
        object.__setattr__(self, "site_archive", archive)

    def kwargs(self) -> dict[str, str | None]:
        return {
            "runtime_dir": self.runtime_dir,
            "code_dir": self.code_dir,
            "site_archive": self.site_archive,
        }


def _environment_config(setup: TrialSetup, image: str | None) -> EnvironmentConfig:
    """The trial's environment: the prebuilt image's, else the task's; on local Docker
    always one whose execs keep secrets off the host's process list."""
    environment = setup.environment.model_copy(deep=True)
    if is_local_docker(environment):
        environment.import_path = SECRET_SAFE_IMPORT_PATH
        environment.type = None
    if setup.compose_overlay is not None:
        environment.extra_docker_compose = [
            *environment.extra_docker_compose,
            setup.compose_overlay,
        ]
    if image is not None:
        environment.import_path = PREBUILT_IMAGE_IMPORT_PATH
        environment.type = None
        environment.kwargs = {**environment.kwargs, "image": image}
    return environment


def _agent_config(
    request: ExecutionRequest,
    workflow_file: Path,
    uploads: _Uploads,
    key_env: str | None,
) -> AgentConfig:
    return AgentConfig(
        import_path=AGENT_IMPORT_PATH,
        kwargs={
            "input_path": str(workflow_file),
            **uploads.kwargs(),
            "agent_timeout_sec": request.agent_timeout_sec,
        },
        override_timeout_sec=with_margin(request.agent_timeout_sec, HARBOR_MARGIN_SEC),
        # a ${VAR} template Harbor fills in and redacts: the key never lands in a file
        env={API_KEY_ENV: "${" + key_env + "}"} if key_env else {},
    )


def _verifier_config(
    setup: TrialSetup,
    request: ExecutionRequest,
    task_dir: Path,
    inputs: Path,
    environment: EnvironmentConfig,
    uploads: _Uploads,
) -> tuple[VerifierConfig, str]:
    if setup.grader_path is None:
        if (task_dir / "tests" / "test.sh").is_file() and request.grade:
            return VerifierConfig(), TASK_GRADES
        return VerifierConfig(disable=True), "no grader configured"
    skip = grader_skip_reason(
        request, True, grade_without_label=setup.grader_config.grade_without_label
    )
    if skip is not None:
        return VerifierConfig(disable=True), skip
    grader_file = inputs / "grader.json"
    spec = grader_input(
        request, setup.grader_path, setup.grader_config, setup.judge, setup.judge_url
    )
    grader_file.write_text(json.dumps(spec), encoding="utf-8")
    timeout = request.grader_timeout_sec
    key_env = setup.judge_api_key_env
    verifier = VerifierConfig(
        import_path=VERIFIER_IMPORT_PATH,
        kwargs={
            "input_path": str(grader_file),
            "grader_timeout_sec": timeout,
            # the grader's own environment is started like the trial's (no secrets here:
            # an environment's env holds ${VAR} templates, never values)
            "grader_environment": environment.model_dump(mode="json"),
            **uploads.kwargs(),
        },
        # the grader's environment starts inside Harbor's verifier deadline
        override_timeout_sec=with_margin(timeout, HARBOR_MARGIN_SEC + GRADER_ENVIRONMENT_START_SEC),
        # like the agent's key: a ${VAR} template, filled in by the verifier plugin and
        # given to the grader's process only
        env={JUDGE_API_KEY_ENV: "${" + key_env + "}"} if key_env else {},
    )
    return verifier, OSMO_GRADES
