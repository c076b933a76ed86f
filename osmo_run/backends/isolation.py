"""Run one phase of a local rollout in a child process that can be killed at its deadline.

An in-process deadline cannot stop synchronous code that never yields (``time.sleep``
in an ``async def``, a CPU-bound loop, a C call): the event loop itself is stuck. With
process isolation each phase runs in ``python -m osmo_run.sdk.sandbox`` (the runner
trials use too), which enforces the deadline itself when it can; when it cannot, the
parent kills it :data:`~osmo_run.sdk.deadlines.PROCESS_KILL_MARGIN_SEC` after the deadline
and reports a timeout. Both count the deadline from the moment the child's phase starts,
which the child tells the parent by writing to a pipe it inherits (``OSMO_RUN_STARTED_FD``):
the interpreter's start-up and the import of the user's code are not the row's time, as
they are not for rows in one process. The API keys (the model's and the judge's) travel in
the child's environment, never in a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.deadlines import PROCESS_KILL_MARGIN_SEC, PROCESS_START_LIMIT_SEC, with_margin
from osmo_run.sdk.exits import exited_message
from osmo_run.sdk.sandbox import (
    API_KEY_ENV,
    CODE_DIR_ENV,
    JUDGE_API_KEY_ENV,
    STARTED_FD_ENV,
    SUPERVISED_ENV,
)
from osmo_run.sdk.types import ErrorCategory, ExecutionResult, Phase

_REAP_SEC = 2.0
"""How long an interrupted phase waits for its killed child's pipes to close."""


class ProcessPhaseRunner:
    """Runs workflow and grader phases in child processes; files live in a private
    temporary directory removed by :meth:`close`."""

    def __init__(
        self,
        code_dir: Path,
        api_key: str | None,
        judge_api_key: str | None,
        artifacts_root: Path | None,
    ) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="osmo-run-isolated-"))  # mode 0700
        package_root = str(Path(__file__).resolve().parents[2])
        python_path = [package_root, os.environ.get("PYTHONPATH", "")]
        self._env = {
            **os.environ,
            CODE_DIR_ENV: str(code_dir.resolve()),
            "PYTHONPATH": os.pathsep.join(p for p in python_path if p),
        }
        if api_key:
            self._env[API_KEY_ENV] = api_key
        if judge_api_key:
            self._env[JUDGE_API_KEY_ENV] = judge_api_key
        if artifacts_root is not None:
            self._env["OSMO_RUN_ARTIFACTS_DIR"] = str(artifacts_root)
        self._counter = 0

    async def run(
        self,
        phase: str,
        spec: dict[str, Any],
        rollout_id: str,
        timeout_sec: float | None,
        own_llm: LLMEndpoint | None = None,
    ) -> ExecutionResult:
        """Run ``phase`` (``workflow`` or ``grader``) on ``spec``; a killed or crashed child
        becomes a failure result, never an exception (cancellation aside). ``own_llm``: the
        rollout's own endpoint (a served request's), whose key (or none) the child gets in
        place of the run's: the run's key must never reach another endpoint."""
        env = self._env
        if own_llm is not None:
            env = {k: v for k, v in self._env.items() if k != API_KEY_ENV}
            if own_llm.api_key:
                env[API_KEY_ENV] = own_llm.api_key
        self._counter += 1
        stem = self._dir / f"{self._counter}-{phase}"
        input_path, result_path = stem.with_suffix(".in.json"), stem.with_suffix(".out.json")
        input_path.write_text(json.dumps(spec), encoding="utf-8")
        read_fd, write_fd = os.pipe()
        try:
            process = await self._spawn(phase, input_path, result_path, write_fd, env)
        finally:
            os.close(write_fd)
        output = asyncio.ensure_future(process.communicate())
        try:
            killed = await self._supervise(phase, rollout_id, timeout_sec, read_fd, output)
        except asyncio.CancelledError:
            process.kill()
            # Read the killed child's pipes to their end now: a transport left open is
            # closed by the garbage collector after the loop, which prints a traceback.
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(output), _REAP_SEC)
            raise
        finally:
            os.close(read_fd)
            input_path.unlink(missing_ok=True)
        if killed is not None:
            process.kill()
            await output
            return killed
        return _read_result(phase, rollout_id, result_path, process.returncode, output.result()[0])

    async def _spawn(
        self,
        phase: str,
        input_path: Path,
        result_path: Path,
        started_fd: int,
        env: dict[str, str],
    ) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "osmo_run.sdk.sandbox",
            phase,
            str(input_path),
            str(result_path),
            env={**env, STARTED_FD_ENV: str(started_fd), SUPERVISED_ENV: "1"},
            pass_fds=(started_fd,),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )

    async def _supervise(
        self,
        phase: str,
        rollout_id: str,
        timeout_sec: float | None,
        started_fd: int,
        output: asyncio.Future[tuple[bytes, bytes]],
    ) -> ExecutionResult | None:
        """Wait for the child; the timeout result when it has to be killed, else ``None``.

        The deadline starts when the child says its phase started (after its interpreter
        and the user's code have loaded, as rows in one process have them loaded already);
        a child that never says so gets :data:`PROCESS_START_LIMIT_SEC`.
        """
        which = Phase.WORKFLOW if phase == "workflow" else Phase.GRADER
        start_limit = None if timeout_sec is None else PROCESS_START_LIMIT_SEC
        try:
            await _wait_readable(started_fd, start_limit)
        except TimeoutError:
            message = f"the {phase} process did not start within {PROCESS_START_LIMIT_SEC:g}s"
            return ExecutionResult.failure(rollout_id, ErrorCategory.TIMEOUT, message, which)
        started = time.monotonic()
        started_phase = os.read(started_fd, 16) != b""  # b"": it exited before the phase
        limit = with_margin(timeout_sec, PROCESS_KILL_MARGIN_SEC) if started_phase else None
        try:
            await asyncio.wait_for(asyncio.shield(output), limit)
        except TimeoutError:
            field = "agent_timeout_sec" if phase == "workflow" else "grader_timeout_sec"
            message = (
                f"{phase} did not return within its {timeout_sec:g}s deadline ({field}); "
                f"its process was killed {PROCESS_KILL_MARGIN_SEC:g}s after the deadline"
            )
            killed = ExecutionResult.failure(rollout_id, ErrorCategory.TIMEOUT, message, which)
            elapsed = time.monotonic() - started
            if phase == "workflow":
                killed.timings.workflow_sec = elapsed
            else:
                killed.timings.grader_sec = elapsed
            return killed
        return None

    def close(self) -> None:
        for path in self._dir.glob("*"):
            path.unlink(missing_ok=True)
        self._dir.rmdir()


async def _wait_readable(fd: int, limit: float | None) -> None:
    """Until ``fd`` has data or is closed; ``TimeoutError`` after ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await asyncio.wait_for(ready, limit)
    finally:
        loop.remove_reader(fd)


def _read_result(
    phase: str, rollout_id: str, result_path: Path, returncode: int | None, output: bytes
) -> ExecutionResult:
    """The result the child wrote, or the failure of a child that wrote none."""
    try:
        data = json.loads(result_path.read_text(encoding="utf-8"))
        result_path.unlink()
        result = ExecutionResult.from_dict(data)
        turns = data.get("turns")
        if isinstance(turns, list):  # the child's captured calls (llm.capture: tokens)
            result.turns = turns
        return result
    except (OSError, ValueError, KeyError):
        tail = output.decode("utf-8", "replace").strip()[-500:]
        if returncode is not None and returncode < 0:
            message = f"the {phase} was killed by signal {-returncode} without returning"
        else:
            message = exited_message(phase, returncode or 0)
        message += f". Output: {tail}" if tail else ""
        which = Phase.WORKFLOW if phase == "workflow" else Phase.GRADER
        return ExecutionResult.failure(rollout_id, ErrorCategory.AGENT_ERROR, message, which)
