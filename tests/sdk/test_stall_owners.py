"""Who a stall of the shared event loop belongs to (``osmo_run.sdk.stalls``): the rollout
whose code held the loop is charged, every other rollout is excused, even when the stall is
just past the threshold (the watchdog has to catch its holder in the act)."""

from __future__ import annotations

import asyncio
import contextvars
import time

from osmo_run.sdk.deadlines import STALL_THRESHOLD_SEC
from osmo_run.sdk.stalls import LoopStallMonitor, StallShare, rollout_owner

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
