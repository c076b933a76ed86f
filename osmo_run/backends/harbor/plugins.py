"""The Harbor agent and verifier osmo-run plugs into each trial.

Both run on the host inside Harbor's trial loop and drive the sandbox runner
(``python3 -m osmo_run.sdk.sandbox``) inside an environment. Inputs go in as files,
results come back as files downloaded into the trial directory
(``agent/osmo_result.json``, ``verifier/osmo_grader_result.json``), never through stdout.

The grader never runs where the workflow ran: when the workflow's runner ends, every
process it left in its environment is killed, and the verifier starts a fresh environment of
the same kind (the same image) that gets only the grader's input, the workflow's sample
included. Nothing the workflow changed (the staged code, ``python3``, the runner's path,
the grader's files) reaches the grader, and no process of the workflow sees the grader's.
The model API key reaches the workflow's runner through Harbor's agent ``env`` (a
``${VAR}`` template, redacted in Harbor's records), the judge's only the grader's runner,
through the verifier's ``env`` (likewise); never through a file or a kwarg.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.environments.factory import EnvironmentFactory
from harbor.models.agent.context import AgentContext
from harbor.models.trial.config import EnvironmentConfig
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
from osmo_run.sdk.exits import exited_message
from osmo_run.sdk.sandbox import CODE_DIR_ENV

AGENT_IMPORT_PATH = "osmo_run.backends.harbor.plugins:OsmoRunAgent"
VERIFIER_IMPORT_PATH = "osmo_run.backends.harbor.plugins:OsmoRunVerifier"

AGENT_RESULT_FILE = "osmo_result.json"
SETUP_TIMINGS_FILE = "osmo_setup.json"
"""Written by the agent's setup in the trial's agent directory: ``dependencies_sec``, the
seconds the upload of the workflow's requirements took (absent when the image has them)."""
GRADER_RESULT_FILE = "osmo_grader_result.json"
TIMEOUT_EXIT = 124  # coreutils `timeout` when it stopped the runner (137 if SIGKILL was needed)
KILLED_EXIT = 137  # SIGKILL: from outside (the container was stopped), or the kernel's OOM kill
GRADER_ENVIRONMENT_START_SEC = 120.0
"""Added to the verifier's Harbor deadline: the grader's fresh environment starts (and, with
no prebuilt image, gets the runtime uploaded) inside it, which takes seconds on an idle
machine and more on a busy one."""
TRAILER = "osmo-run-runner:"
"""Starts the last line the runner's shell wrapper prints once the runner has ended: its
exit status, whether it wrote a result, and the container's OOM kills during it. The line
is missing when the wrapper itself was stopped (the container was killed, the engine
failed)."""
_TRAILER_RE = re.compile(re.escape(TRAILER) + r" exit=(\d+) result=(yes|no) oom=(\d+) (\d+)")


_ENGINE_GONE_MARKERS = (
    "cannot connect to the docker daemon",
    "is the docker daemon running",
    "no such container",
    "is not running",
    "error response from daemon",
)


_OOM_KILLS = (
    "oom_kills() { n=0; for f in /sys/fs/cgroup/memory.events "
    "/sys/fs/cgroup/memory/memory.oom_control; do [ -r $f ] || continue; "
    'while read -r k v; do [ "$k" = oom_kill ] && n=$((n + v)); done < $f; done; echo $n; }'
)
"""A shell function printing how many processes the kernel killed for want of memory in
this container's cgroup (cgroup v2 ``memory.events``, v1 ``memory.oom_control``): no
tool beyond the shell, so it works in any image."""


_KILL_NEW_PROCESSES = (
    "keep=' '; for p in /proc/[0-9]*; do keep=\"$keep${p#/proc/} \"; done; "
    'kill_new() { for p in /proc/[0-9]*; do case "$keep" in *" ${p#/proc/} "*) ;; '
    '*) kill -9 "${p#/proc/}" 2>/dev/null;; esac; done; }'
)
"""Shell code remembering the processes that run before the runner starts (the
container's init, its main command) and a function killing every other one: what the
code started in the background, in its own session included, does not outlive it."""


def _runner_command(
    phase: str, input_path: str, result_path: str, log_path: str, limit: float | None
) -> str:
    """The shell command running ``phase``'s runner, then killing every process it left,
    then printing the last 2000 bytes of its log and the :data:`TRAILER` line; it exits
    with the runner's status."""
    runner = f"python3 -m osmo_run.sdk.sandbox {phase} {input_path} {result_path}"
    if limit is not None:
        runner = f"timeout -k 5 {int(limit) + 1} {runner}"
    log, result = shlex.quote(log_path), shlex.quote(result_path)
    return (
        f"{_OOM_KILLS}; {_KILL_NEW_PROCESSES}; before=$(oom_kills); rm -f {result}; "
        f"{runner} > {log} 2>&1; code=$?; kill_new; "
        f"tail -c 2000 {log}; [ -s {result} ] && wrote=yes || wrote=no; "
        f'echo; echo "{TRAILER} exit=$code result=$wrote oom=$before $(oom_kills)"; exit $code'
    )


@dataclass(frozen=True)
class RunnerEnd:
    """How a runner ended, from its exec's exit code and output (see :data:`TRAILER`)."""

    return_code: int
    output: str
    wrapper_finished: bool
    runner_exit: int
    wrote_result: bool
    out_of_memory: bool

    @classmethod
    def parse(cls, return_code: int, output: str) -> RunnerEnd:
        found = list(_TRAILER_RE.finditer(output))
        if not found:
            return cls(return_code, output.strip(), False, return_code, False, False)
        last = found[-1]
        before, after = int(last.group(3)), int(last.group(4))
        log = output[: last.start()].strip()
        return cls(
            return_code, log, True, int(last.group(1)), last.group(2) == "yes", after > before
        )


def _runner_env() -> dict[str, str]:
    return {
        "PYTHONPATH": f"{CONTAINER_RUNTIME_DIR}:{CONTAINER_DEPS_DIR}",
        CODE_DIR_ENV: CONTAINER_CODE_DIR,
        "OSMO_RUN_ARTIFACTS_DIR": "/logs/artifacts",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def raise_for_end(
    what: str, end: RunnerEnd, limit: float | None, elapsed: float, container_alive: bool
) -> None:
    """Raise what the end of ``what``'s runner (``workflow`` or ``grader``) means, or
    return when it wrote its result.

    Its own death is the code's (:class:`OsmoRunSandboxRunnerError`, ``agent_error``):
    an exit without returning (``sys.exit``, ``os._exit``), a signal (it killed itself),
    or the container's memory limit (the kernel killed it), or its wrapper killed from
    inside a container that is still alive (``container_alive``, asked only then). Killed at
    its hard deadline is :class:`OsmoRunSandboxTimeoutError`. Only a container that died
    or an engine that failed is :class:`OsmoRunSandboxInfraError`.
    """
    tail = end.output[-600:]
    timed_out = limit is not None and elapsed >= limit
    code = end.runner_exit
    if code in (TIMEOUT_EXIT, KILLED_EXIT) and timed_out and limit is not None:
        raise OsmoRunSandboxTimeoutError(
            f"the {what} runner was killed at its hard deadline of {int(limit) + 1}s "
            f"(the {what} blocked without returning)"
        )
    if end.wrapper_finished:
        if end.wrote_result and code == 0:
            return
        if end.out_of_memory:
            raise OsmoRunSandboxRunnerError(
                f"the {what} ran out of memory and was killed (exit code {code}): it needs "
                "more than the task's [environment].memory_mb allows the container"
            )
        if code > 128:
            raise OsmoRunSandboxRunnerError(
                f"the {what} was killed by signal {code - 128} (exit code {code}) without "
                f"returning. Output: {tail}"
            )
        raise OsmoRunSandboxRunnerError(f"{exited_message(what, code)}. Output: {tail}")
    if container_alive:
        raise OsmoRunSandboxRunnerError(
            f"the {what} runner was stopped from inside its container (exit code {code}) "
            f"without returning. Output: {tail}"
        )
    if any(marker in tail.lower() for marker in _ENGINE_GONE_MARKERS):
        raise OsmoRunSandboxInfraError(f"the container engine failed during the {what}: {tail}")
    raise OsmoRunSandboxInfraError(
        f"the {what} runner was killed with its container (exit code {code}: the container "
        f"was stopped from outside or the engine failed). Output: {tail}"
    )


async def _is_alive(environment: BaseEnvironment) -> bool:
    """Whether ``environment`` still runs commands (one short exec)."""
    try:
        probe = await environment.exec("true", timeout_sec=60)
    except Exception:
        return False
    return bool(probe.return_code == 0)


async def _run_phase(
    environment: BaseEnvironment,
    what: str,
    command: str,
    env: dict[str, str],
    limit: float | None,
) -> None:
    """Run ``what``'s runner ``command`` in ``environment``; return once it wrote its
    result, else raise what its end means (:func:`raise_for_end`)."""
    started = time.monotonic()
    result = await environment.exec(command, env=env)
    elapsed = time.monotonic() - started
    end = RunnerEnd.parse(result.return_code, (result.stdout or "") + (result.stderr or ""))
    if end.wrapper_finished and end.wrote_result and end.runner_exit == 0:
        return
    alive = not end.wrapper_finished and await _is_alive(environment)
    raise_for_end(what, end, limit, elapsed, alive)


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
        await _run_phase(environment, "workflow", command, _runner_env(), self._limit)


class OsmoRunVerifier(BaseVerifier):
    """Runs the row's grader on the workflow's sample in a fresh environment of its own.

    Grades only when the workflow phase left a successful result; otherwise returns no
    rewards and the backend reports the workflow's failure. kwargs: ``input_path`` (host
    file with the grader's request, label included), ``grader_timeout_sec``,
    ``grader_environment`` (the trial's ``EnvironmentConfig`` as JSON data: the grader's
    environment is started the same way, from the same image) and, as for the agent,
    ``runtime_dir``, ``code_dir`` and ``site_archive`` to upload when no image holds them.
    """

    def __init__(
        self,
        *,
        input_path: str,
        grader_timeout_sec: float | None = None,
        grader_environment: dict[str, Any] | None = None,
        runtime_dir: str | None = None,
        code_dir: str | None = None,
        site_archive: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._input_path = Path(input_path)
        self._limit = with_margin(grader_timeout_sec, SANDBOX_KILL_MARGIN_SEC)
        self._environment_config = EnvironmentConfig.model_validate(grader_environment or {})
        self._runtime_dir = runtime_dir
        self._code_dir = code_dir
        self._site_archive = site_archive

    @contextlib.asynccontextmanager
    async def _grader_environment(self) -> AsyncIterator[BaseEnvironment]:
        """A fresh environment like the trial's, for the grader alone; stopped and
        removed on the way out, cancellation included."""
        trial_name = self.trial_paths.trial_dir.name
        environment = EnvironmentFactory.create_environment_from_config(
            config=self._environment_config,
            environment_dir=self.task.paths.environment_dir,
            environment_name=self.task.short_name,
            session_id=f"{trial_name}__grader",
            trial_paths=self.trial_paths,
            task_env_config=self.task.config.environment,
            logger=self.logger,
        )
        try:
            await environment.start(force_build=False)
            yield environment
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(environment.stop(delete=True))

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
        verifier_dir = self.trial_paths.verifier_dir
        verifier_dir.mkdir(parents=True, exist_ok=True)
        for stale in verifier_dir.glob("osmo_*"):  # only what this grader writes is read
            stale.unlink(missing_ok=True)
        staged = verifier_dir / "osmo_grader_input.json"
        staged.write_text(json.dumps(spec), encoding="utf-8")
        async with self._grader_environment() as environment:
            await self._grade_in(environment, staged)
        try:
            graded = json.loads((verifier_dir / GRADER_RESULT_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise OsmoRunSandboxRunnerError(
                f"the grader runner left no readable result: {exc}"
            ) from None
        reward = (graded.get("sample") or {}).get("reward")
        if graded.get("status") == "success" and reward is not None:
            return VerifierResult(rewards={"reward": reward})
        return VerifierResult(rewards=None)

    async def _grade_in(self, environment: BaseEnvironment, staged: Path) -> None:
        """Set up ``environment``, run the grader there and download its directory."""
        if self._runtime_dir is not None and self._code_dir is not None:
            await _upload_runtime(environment, self._runtime_dir, self._code_dir)
        if self._site_archive is not None:
            await _upload_dependencies(environment, self._site_archive)
        remote = "/logs/verifier"
        await environment.exec(f"mkdir -p {remote} && chmod 777 {remote}", user="root")
        await environment.upload_file(
            source_path=staged, target_path=f"{remote}/osmo_grader_input.json"
        )
        command = _runner_command(
            "grader",
            f"{remote}/osmo_grader_input.json",
            f"{remote}/{GRADER_RESULT_FILE}",
            f"{remote}/osmo_runner.log",
            self._limit,
        )
        # the judge's key: VerifierConfig.env holds its ${VAR} template, resolved here
        env = {**_runner_env(), **resolve_env_vars(self.override_env)}
        try:
            await _run_phase(environment, "grader", command, env, self._limit)
        finally:
            with contextlib.suppress(Exception):
                await environment.download_dir(
                    source_dir=remote, target_dir=self.trial_paths.verifier_dir
                )
