"""The daemon workers math-verify runs on: results and errors come back, a job whose caller
gave up never starts, and a job that never ends does not hold up the process's exit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading

import pytest

from osmo_run.graders.workers import DaemonWorkers
from tests.conftest import REPO


def test_results_and_errors_come_back() -> None:
    workers = DaemonWorkers(2, "test")

    async def main() -> tuple[int, str]:
        value = await workers.run(pow, 2, 10)
        with pytest.raises(ZeroDivisionError):
            await workers.run(divmod, 1, 0)
        return value, await workers.run(lambda: threading.current_thread().name)

    value, thread = asyncio.run(main())
    assert value == 1024
    assert thread.startswith("test-")


def test_a_job_whose_caller_gave_up_never_starts() -> None:
    workers = DaemonWorkers(1, "test")
    release = threading.Event()
    started: list[str] = []

    async def main() -> None:
        blocker = asyncio.ensure_future(workers.run(release.wait, 10))
        await asyncio.sleep(0.05)  # the only worker is busy now
        queued = asyncio.ensure_future(workers.run(started.append, "queued"))
        await asyncio.sleep(0)  # it runs: the job is queued behind the blocker
        queued.cancel()
        await asyncio.sleep(0)  # the cancellation reaches the job's future
        release.set()
        await blocker
        await workers.run(started.append, "after")

    asyncio.run(main())
    assert started == ["after"]


def test_a_job_that_never_ends_does_not_hold_up_the_exit() -> None:
    script = textwrap.dedent(
        """
        import asyncio, threading
        from osmo_run.graders.workers import DaemonWorkers

        workers = DaemonWorkers(1, "stuck")

        async def main():
            try:
                await asyncio.wait_for(workers.run(threading.Event().wait), 0.2)
            except TimeoutError:
                print("gave up")

        asyncio.run(main())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "gave up"
