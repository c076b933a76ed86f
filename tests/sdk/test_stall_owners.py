"""Who a stall of the shared event loop belongs to (``osmo_run.sdk.stalls``): the rollout
whose code held the loop is charged, every other rollout is excused, even when the stall is
just past the threshold (the watchdog has to catch its holder in the act)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
import textwrap
import time

import pytest

from osmo_run.sdk.deadlines import STALL_THRESHOLD_SEC
from osmo_run.sdk.stalls import LoopStallMonitor, StallShare, rollout_owner
from tests.conftest import REPO
from tests.sdk.test_public_api import _python311

SHORT_STALL_SEC = 0.15
"""Begun as the heartbeat answers, the loop misses its next beat by just over the threshold:
a stall that counts, and one the watchdog used to see no holder of (it looked only once the
heartbeat was the threshold late, and by then the stall was over)."""


def _shares_after_stall(block: object) -> tuple[StallShare, StallShare]:
    """Run ``block`` (a coroutine function that holds the loop) right after the monitor
    starts; the shares of the time since then of the rollout ``culprit`` and of a bystander."""

    async def main() -> tuple[StallShare, StallShare]:
        monitor = LoopStallMonitor(asyncio.get_running_loop())
        monitor.start()  # the heartbeat has just answered: the stall begins right after it
        try:
            since = time.monotonic()
            assert callable(block)
            await block()
            await asyncio.sleep(0.12)  # the heartbeat after the stall has run
            return monitor.during(since, "culprit"), monitor.during(since, "bystander")
        finally:
            monitor.close()

    return asyncio.run(main())


async def _blocking_rollout() -> None:
    """The rollout ``culprit``'s task calls ``time.sleep``, as a workflow might."""
    context = contextvars.copy_context()
    context.run(rollout_owner.set, "culprit")

    async def body() -> None:
        time.sleep(SHORT_STALL_SEC)

    await asyncio.get_running_loop().create_task(body(), context=context)


async def _blocking_callback() -> None:
    """Code outside any rollout (a plain callback, as the runner's own) holds the loop."""
    done = asyncio.get_running_loop().create_future()

    def block() -> None:
        time.sleep(SHORT_STALL_SEC)
        done.set_result(None)

    asyncio.get_running_loop().call_soon(block)
    await done


def test_a_short_stall_is_charged_to_the_rollout_that_held_the_loop() -> None:
    for _ in range(3):  # the old watchdog missed such a stall in most runs
        culprit, bystander = _shares_after_stall(_blocking_rollout)
        assert culprit.foreign == 0.0, culprit  # never excused for its own stall
        assert culprit.own >= STALL_THRESHOLD_SEC, culprit
        assert bystander.culprits == ("culprit",), bystander
        assert bystander.foreign >= STALL_THRESHOLD_SEC and bystander.own == 0.0, bystander


def test_a_stall_outside_any_rollout_excuses_every_rollout() -> None:
    culprit, bystander = _shares_after_stall(_blocking_callback)
    for share in (culprit, bystander):
        assert share.foreign >= STALL_THRESHOLD_SEC and share.own == 0.0, share
        assert share.culprits == (), share


def test_beat_listeners_run_on_the_loop_after_a_stall_is_recorded() -> None:
    """A sweep riding on the heartbeat sees the stall that delayed the beat already."""
    seen: list[tuple[float, float]] = []

    async def main() -> None:
        monitor = LoopStallMonitor(asyncio.get_running_loop())
        since = time.monotonic()

        def listener(now: float) -> None:
            assert asyncio.get_running_loop() is monitor.loop
            seen.append((now, monitor.during(since, "bystander").foreign))

        def broken(now: float) -> None:
            raise RuntimeError("a listener bug")

        asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)
        monitor.add_beat_listener(broken)
        monitor.add_beat_listener(listener)
        monitor.start()
        try:
            await _blocking_rollout()
            await asyncio.sleep(0.12)
        finally:
            monitor.close()

    asyncio.run(main())
    assert len(seen) >= 2  # the broken listener stopped neither the beat nor the others
    assert seen[0][1] >= STALL_THRESHOLD_SEC  # the first beat came after the stall, knowing it


AFTER_THE_ROW = textwrap.dedent(
    """
    import asyncio, sys, time
    from osmo_run import AgentWorkflow, AgentWorkflowConfig, ExecutionRequest
    from osmo_run.sdk.rollout import run_workflow_phase
    from osmo_run.sdk.stalls import LoopStallMonitor

    class Quick(AgentWorkflow):
        async def run(self, ctx):
            await asyncio.sleep(0)
            return [*ctx.prompt, {"role": "assistant", "content": "hi"}]

    async def worker(monitor):
        request = ExecutionRequest(
            id="r1", prompt=[{"role": "user", "content": "q"}], agent_timeout_sec=30
        )
        result = await run_workflow_phase(  # in place: the worker task runs the phase
            request, Quick, AgentWorkflowConfig(), stalls=monitor, on_abandon=print
        )
        since = time.monotonic()
        time.sleep(0.15)  # the worker's own code after the row (recording it) holds the loop
        await asyncio.sleep(0.12)  # the heartbeat after the stall has run
        return result, monitor.during(since, "r1")

    async def main():
        monitor = LoopStallMonitor(asyncio.get_running_loop())
        monitor.start()
        try:
            result, share = await asyncio.get_running_loop().create_task(worker(monitor))
        finally:
            monitor.close()
        print(sys.version_info[:2], result.status.value, share.own, share.foreign)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("python", ["3.11", "this"])
def test_a_stall_after_a_row_ran_in_place_is_not_that_rows(python: str) -> None:
    """A worker runs a row's phase in its own task, then blocks the loop in the runner's
    code: the stall is no row's, not the last row's (Python 3.11 names the task for the
    row while its phase runs; the name used to stay)."""
    interpreter = _python311() if python == "3.11" else sys.executable
    if interpreter is None:
        pytest.skip("no Python 3.11 interpreter on PATH")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
    flags = ["-S"] if python == "3.11" else []  # the SDK alone: stdlib only
    proc = subprocess.run(
        [interpreter, *flags, "-c", AFTER_THE_ROW],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    version, status, own, foreign = proc.stdout.rsplit(maxsplit=3)
    assert status == "success", proc.stdout
    assert float(own) == 0.0, proc.stdout  # the row is not blamed
    assert float(foreign) >= STALL_THRESHOLD_SEC, proc.stdout  # the stall was seen
    if python == "3.11":
        assert version == "(3, 11)"
