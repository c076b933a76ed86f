"""The Harbor agent and verifier osmo-run plugs into each trial.

Both run on the host inside Harbor's trial loop and drive the sandbox runner
(``python3 -m osmo_run.sdk.sandbox``) inside the environment. Inputs go in as files,
results come back as files Harbor downloads into the trial directory
(``agent/osmo_result.json``, ``verifier/osmo_grader_result.json``), never through stdout.
The model API key reaches the runner through Harbor's agent ``env`` (a ``${VAR}``
template, redacted in Harbor's records), the judge's through the verifier's ``env``
(likewise), never through a file or a kwarg.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext
from harbor.models.verifier.result import VerifierResult
from harbor.utils.env import resolve_env_vars
from harbor.verifier.base import BaseVerifier

import osmo_run
from osmo_run.backends.harbor.runtime import (
    CONTAINER_CODE_DIR,
    CONTAINER_DEPS_DIR,
    CONTAINER_ROOT,
    CONTAINER_RUNTIME_DIR,
)
from osmo_run.errors import (
    OsmoRunSandboxInfraError,
    OsmoRunSandboxRunnerError,
    OsmoRunSandboxTimeoutError,
)
from osmo_run.sdk.deadlines import SANDBOX_KILL_MARGIN_SEC, with_margin
from osmo_run.sdk.sandbox import CODE_DIR_ENV

AGENT_IMPORT_PATH = "osmo_run.backends.harbor.plugins:OsmoRunAgent"
VERIFIER_IMPORT_PATH = "osmo_run.backends.harbor.plugins:OsmoRunVerifier"

AGENT_RESULT_FILE = "osmo_result.json"
SETUP_TIMINGS_FILE = "osmo_setup.json"
"""Written by the agent's setup in the trial's agent directory: ``dependencies_sec``, the
seconds the upload of the workflow's requirements took (absent when the image has them)."""
GRADER_RESULT_FILE = "osmo_grader_result.json"
TIMEOUT_EXIT = 124  # coreutils `timeout` when it stopped the runner (137 if SIGKILL was needed)
KILLED_EXIT = 137  # SIGKILL from outside: the container was killed or ran out of memory


_ENGINE_GONE_MARKERS = (
    "cannot connect to the docker daemon",
    "is the docker daemon running",
    "no such container",
    "is not running",
    "error response from daemon",
)


def _runner_command(
    phase: str, input_path: str, result_path: str, log_path: str, limit: float | None
) -> str:
    runner = f"python3 -m osmo_run.sdk.sandbox {phase} {input_path} {result_path}"
    if limit is not None:
        runner = f"timeout -k 5 {int(limit) + 1} {runner}"
    return f"{runner} > {shlex.quote(log_path)} 2>&1"


def _runner_env() -> dict[str, str]:
    return {
        "PYTHONPATH": f"{CONTAINER_RUNTIME_DIR}:{CONTAINER_DEPS_DIR}",
        CODE_DIR_ENV: CONTAINER_CODE_DIR,
        "OSMO_RUN_ARTIFACTS_DIR": "/logs/artifacts",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _raise_for_exit(
    what: str, return_code: int, output: str, limit: float | None, elapsed: float
) -> None:
    tail = output.strip()[-600:]
    lowered = tail.lower()
    timed_out = limit is not None and elapsed >= limit
    if return_code in (TIMEOUT_EXIT, KILLED_EXIT) and timed_out and limit is not None:
        raise OsmoRunSandboxTimeoutError(
            f"the {what} runner was killed at its hard deadline of {int(limit) + 1}s "
            "(the workflow blocked without returning)"
        )
    if return_code == KILLED_EXIT:
        raise OsmoRunSandboxInfraError(
            f"the {what} runner was killed (exit 137: the container was stopped from outside "
            f"or ran out of memory). Output: {tail}"
        )
    if any(marker in lowered for marker in _ENGINE_GONE_MARKERS):
        raise OsmoRunSandboxInfraError(f"the container engine failed during the {what}: {tail}")
    raise OsmoRunSandboxRunnerError(
        f"the {what} runner exited with code {return_code} without a result. Output: {tail}"
    )


async def _upload_runtime(environment: BaseEnvironment, runtime_dir: str, code_dir: str) -> None:
    await environment.exec(f"mkdir -p {CONTAINER_RUNTIME_DIR} {CONTAINER_CODE_DIR}", user="root")
    await environment.upload_dir(source_dir=runtime_dir, target_dir=CONTAINER_RUNTIME_DIR)
    await environment.upload_dir(source_dir=code_dir, target_dir=CONTAINER_CODE_DIR)
    await environment.exec(f"chmod -R a+rX {CONTAINER_RUNTIME_DIR}/..", user="root")


async def _upload_dependencies(environment: BaseEnvironment, site_archive: str) -> None:
    """Upload the installed requirements (one tar) and extract them under
    :data:`CONTAINER_DEPS_DIR`: one file moves, not thousands (remote environments upload
    file by file)."""
    remote = f"{CONTAINER_ROOT}/deps.tar"
    await environment.exec(f"mkdir -p {CONTAINER_DEPS_DIR}", user="root")
    await environment.upload_file(source_path=site_archive, target_path=remote)
    done = await environment.exec(
        f"tar -xf {remote} -C {CONTAINER_DEPS_DIR} && rm -f {remote} "
        f"&& chmod -R a+rX {CONTAINER_DEPS_DIR}",
        user="root",
    )
    if done.return_code != 0:
        output = " ".join((done.stdout or done.stderr or "").split())[-300:]
        raise OsmoRunSandboxInfraError(
            "could not extract the workflow's requirements in the trial (the image needs "
            f"tar): {output}"
        )


class OsmoRunAgent(BaseAgent):
    """Runs the row's workflow in the trial environment through the sandbox runner.

    kwargs (from ``AgentConfig.kwargs``, persisted by Harbor, so paths only):
    ``input_path`` (host file with the runner's input), ``runtime_dir`` and ``code_dir``
    (staged directories to upload, or ``None`` when the image already holds them),
    ``site_archive`` (the installed requirements to upload, or ``None``) and
    ``agent_timeout_sec``.
    """

    def __init__(
        self,
        logs_dir: Path,
        model_name: str | None = None,
        *,
        input_path: str,
        runtime_dir: str | None = None,
        code_dir: str | None = None,
        site_archive: str | None = None,
        agent_timeout_sec: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(logs_dir=logs_dir, model_name=model_name, **kwargs)
        self._input_path = input_path
        self._runtime_dir = runtime_dir
        self._code_dir = code_dir
        self._site_archive = site_archive
        self._limit = with_margin(agent_timeout_sec, SANDBOX_KILL_MARGIN_SEC)

    @staticmethod
    def name() -> str:
        return "osmo-run"

    def version(self) -> str | None:
        return osmo_run.__version__

    async def setup(self, environment: BaseEnvironment) -> None:
        if self._runtime_dir is not None and self._code_dir is not None:
            await _upload_runtime(environment, self._runtime_dir, self._code_dir)
        if self._site_archive is not None:
            started = time.monotonic()
            await _upload_dependencies(environment, self._site_archive)
            timings = {"dependencies_sec": round(time.monotonic() - started, 6)}
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            (self.logs_dir / SETUP_TIMINGS_FILE).write_text(json.dumps(timings))
        check = await environment.exec(
            "python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' && command -v timeout"
        )
        if check.return_code != 0:
            output = (check.stdout or "").strip()[-300:]
            if any(marker in output.lower() for marker in _ENGINE_GONE_MARKERS):
                raise OsmoRunSandboxInfraError(f"the container engine failed in setup: {output}")
            raise OsmoRunSandboxInfraError(
                "the trial image needs python3 >= 3.11 and coreutils' `timeout` to run "
                f"workflows; install them in the task's image. ({output or 'not found'})"
            )

    async def run(
        self, instruction: str, environment: BaseEnvironment, context: AgentContext
    ) -> None:
        del instruction, context  # the row's prompt is in the input file; results are files
        logs = str(self.environment_logs_dir)
        input_file = f"{logs}/osmo_input.json"
        await environment.upload_file(source_path=self._input_path, target_path=input_file)
        command = _runner_command(
            "workflow",
            input_file,
            f"{logs}/{AGENT_RESULT_FILE}",
            f"{logs}/osmo_runner.log",
            self._limit,
        )
        command += f"; code=$?; cat {logs}/osmo_runner.log | tail -c 2000; exit $code"
        started = time.monotonic()
        result = await environment.exec(command, env=_runner_env())
        if result.return_code != 0:
            elapsed = time.monotonic() - started
            _raise_for_exit(
                "workflow", result.return_code, result.stdout or "", self._limit, elapsed
            )


class OsmoRunVerifier(BaseVerifier):
    """Runs the row's grader in the trial environment on the workflow's sample.

    Grades only when the workflow phase left a successful result; otherwise returns no
    rewards and the backend reports the workflow's failure. kwargs: ``input_path`` (host
    file with the grader's request, label included) and ``grader_timeout_sec``.
    """

    def __init__(
        self, *, input_path: str, grader_timeout_sec: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._input_path = Path(input_path)
        self._limit = with_margin(grader_timeout_sec, SANDBOX_KILL_MARGIN_SEC)

    async def verify(self) -> VerifierResult:
        agent_result = self.trial_paths.agent_dir / AGENT_RESULT_FILE
        try:
            workflow_result = json.loads(agent_result.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return VerifierResult(rewards=None)
        if workflow_result.get("status") != "success":
            return VerifierResult(rewards=None)
        spec = json.loads(self._input_path.read_text(encoding="utf-8"))
        spec["workflow_result"] = workflow_result
        staged = self.trial_paths.verifier_dir / "osmo_grader_input.json"
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(json.dumps(spec), encoding="utf-8")
        remote = "/logs/verifier"
        await self.environment.exec(f"mkdir -p {remote} && chmod 777 {remote}", user="root")
        await self.environment.upload_file(
            source_path=staged, target_path=f"{remote}/osmo_grader_input.json"
        )
        command = _runner_command(
            "grader",
            f"{remote}/osmo_grader_input.json",
            f"{remote}/{GRADER_RESULT_FILE}",
            f"{remote}/osmo_runner.log",
            self._limit,
        )
        command += f"; code=$?; tail -c 2000 {remote}/osmo_runner.log; exit $code"
        started = time.monotonic()
        # the judge's key: VerifierConfig.env holds its ${VAR} template, resolved here
        env = {**_runner_env(), **resolve_env_vars(self.override_env)}
        result = await self.environment.exec(command, env=env)
        elapsed = time.monotonic() - started
        await self.environment.download_dir(
            source_dir=remote, target_dir=self.trial_paths.verifier_dir
        )
        if result.return_code != 0:
            _raise_for_exit("grader", result.return_code, result.stdout or "", self._limit, elapsed)
        try:
            graded = json.loads((self.trial_paths.verifier_dir / GRADER_RESULT_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise OsmoRunSandboxRunnerError(
                f"the grader runner left no readable result: {exc}"
            ) from None
        reward = (graded.get("sample") or {}).get("reward")
        if graded.get("status") == "success" and reward is not None:
            return VerifierResult(rewards={"reward": reward})
        return VerifierResult(rewards=None)
