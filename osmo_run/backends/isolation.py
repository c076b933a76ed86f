"""Run one phase of a local rollout in a child process that can be killed at its deadline.

An in-process deadline cannot stop synchronous code that never yields (``time.sleep``
in an ``async def``, a CPU-bound loop, a C call): the event loop itself is stuck. With
process isolation each phase runs in ``python -m osmo_run.sdk.sandbox`` (the runner
trials use too), which enforces the deadline itself when it can; when it cannot, the
parent kills it shortly after the deadline and reports a timeout. The API keys (the
model's and the judge's) travel in the child's environment, never in a file.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from osmo_run.sdk.deadlines import PROCESS_KILL_MARGIN_SEC, with_margin
from osmo_run.sdk.sandbox import API_KEY_ENV, CODE_DIR_ENV, JUDGE_API_KEY_ENV
from osmo_run.sdk.types import ErrorCategory, ExecutionResult, Phase


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
        self, phase: str, spec: dict[str, Any], rollout_id: str, timeout_sec: float | None
    ) -> ExecutionResult:
        """Run ``phase`` (``workflow`` or ``grader``) on ``spec``; a killed or crashed child
        becomes a failure result, never an exception (cancellation aside)."""
        self._counter += 1
        stem = self._dir / f"{self._counter}-{phase}"
        input_path, result_path = stem.with_suffix(".in.json"), stem.with_suffix(".out.json")
        input_path.write_text(json.dumps(spec), encoding="utf-8")
        which = Phase.WORKFLOW if phase == "workflow" else Phase.GRADER
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "osmo_run.sdk.sandbox",
            phase,
            str(input_path),
            str(result_path),
            env=self._env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        limit = with_margin(timeout_sec, PROCESS_KILL_MARGIN_SEC)
        try:
            output, _ = await asyncio.wait_for(process.communicate(), limit)
        except TimeoutError:
            process.kill()
            await process.wait()
            field = "agent_timeout_sec" if phase == "workflow" else "grader_timeout_sec"
            message = (
                f"{phase} did not return within its {timeout_sec:g}s deadline ({field}); "
                "its process was killed"
            )
            return ExecutionResult.failure(rollout_id, ErrorCategory.TIMEOUT, message, which)
        except asyncio.CancelledError:
            process.kill()
            raise
        finally:
            input_path.unlink(missing_ok=True)
        try:
            data = json.loads(result_path.read_text(encoding="utf-8"))
            result_path.unlink()
            return ExecutionResult.from_dict(data)
        except (OSError, ValueError, KeyError):
            tail = output.decode("utf-8", "replace").strip()[-500:]
            message = (
                f"the {phase} process exited with code {process.returncode} without a "
                f"result (a crash or os._exit?): {tail}"
            )
            return ExecutionResult.failure(rollout_id, ErrorCategory.AGENT_ERROR, message, which)

    def close(self) -> None:
        for path in self._dir.glob("*"):
            path.unlink(missing_ok=True)
        self._dir.rmdir()
