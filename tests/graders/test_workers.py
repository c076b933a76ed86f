"""The grader worker processes: results and errors come back, a worker is reused across
calls, a cancelled call's worker is killed and replaced, a worker that dies is reported
and replaced, and a call that never ends holds up neither the caller nor the exit."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from osmo_run.graders.workers import GraderWorkers, WorkerDied
from tests.conftest import REPO


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@pytest.fixture
def workers() -> Iterator[GraderWorkers]:
    pool = GraderWorkers(1)
    yield pool
    pool.kill_all()


def test_results_and_errors_come_back_from_one_reused_worker(workers: GraderWorkers) -> None:
    async def main() -> tuple[int, int, int]:
        first = await workers.run(os.getpid)
        assert await workers.run(pow, 2, 10) == 1024
        with pytest.raises(ZeroDivisionError):
            await workers.run(divmod, 1, 0)
        with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
            await workers.run(lambda: 1)  # not picklable: the worker is still fine
        return first, await workers.run(os.getpid), os.getpid()

    first, second, here = asyncio.run(main())
    assert first == second != here


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_cancelled_call_kills_its_worker_and_the_next_call_gets_a_new_one(
    workers: GraderWorkers,
) -> None:
    async def main() -> tuple[int, int]:
        before = await workers.run(os.getpid)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(workers.run(time.sleep, 600), 0.5)
        return before, await workers.run(os.getpid)

    started = time.monotonic()
    before, after = asyncio.run(main())
    assert time.monotonic() - started < 30
    assert before != after
    assert _gone(before)


def test_a_worker_that_dies_during_a_call_is_reported_and_replaced(
    workers: GraderWorkers,
) -> None:
    async def main() -> int:
        with pytest.raises(WorkerDied, match="ended during the call"):
            await workers.run(os._exit, 7)
        return await workers.run(pow, 3, 2)

    assert asyncio.run(main()) == 9


def test_a_call_that_never_ends_holds_up_neither_its_caller_nor_the_exit() -> None:
    """The worker computes holding its GIL; the caller's deadline still fires, and the
    process exits at once without waiting for it."""
    script = textwrap.dedent(
        """
        import asyncio, os
        from osmo_run.graders.workers import GRADER_WORKERS

        async def main():
            print(await GRADER_WORKERS.run(os.getpid), flush=True)
            try:
                await asyncio.wait_for(GRADER_WORKERS.run(pow, 9, 9**9), 1)
            except TimeoutError:
                print("gave up", flush=True)
            print(await GRADER_WORKERS.run(os.getpid), flush=True)

        asyncio.run(main())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    killed, said, idle = proc.stdout.splitlines()
    assert said == "gave up"
    if Path("/proc/self/stat").exists():
        assert _gone(int(killed))
        assert _gone(int(idle))  # the idle worker ended with its parent


def test_a_call_does_not_wait_behind_a_long_one_while_the_limit_allows_another_worker() -> None:
    pool = GraderWorkers(2)

    async def main() -> int:
        slow = asyncio.ensure_future(pool.run(time.sleep, 600))
        try:
            return await asyncio.wait_for(pool.run(pow, 2, 5), 60)
        finally:
            slow.cancel()

    try:
        assert asyncio.run(main()) == 32
    finally:
        pool.kill_all()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_workers_come_back_after_the_process_they_are_forked_from_is_killed(
    workers: GraderWorkers,
) -> None:
    """The zygote (a worker's parent) killed from outside: its workers die with it, and
    the next call starts a new one."""

    async def main() -> tuple[int, int]:
        worker = await workers.run(os.getpid)
        zygote = await workers.run(os.getppid)
        os.kill(zygote, signal.SIGKILL)
        assert _gone(worker)
        return zygote, await workers.run(os.getppid)

    before, after = asyncio.run(main())
    assert before != after


def test_a_call_whose_caller_gave_up_while_it_waited_never_runs(tmp_path: Path) -> None:
    pool = GraderWorkers(1)
    marker = tmp_path / "ran"

    async def main() -> None:
        busy = asyncio.ensure_future(pool.run(time.sleep, 600))  # the only worker
        queued = asyncio.ensure_future(pool.run(Path.touch, marker))
        await asyncio.sleep(0.5)
        queued.cancel()
        busy.cancel()
        await asyncio.gather(busy, queued, return_exceptions=True)
        assert await pool.run(pow, 2, 3) == 8  # the next call runs, on a new worker

    try:
        asyncio.run(main())
    finally:
        pool.kill_all()
    assert not marker.exists()
