"""Trainers that misbehave: one that disappears mid-poll, a thousand rollouts nobody ever
reads, and what the person watching the server sees meanwhile."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import httpx

from osmo_run.serve.session import ServedPlainDisplay
from tests.serve.harness import LEASE, serving


def test_a_trainer_that_disappears_mid_poll_leaves_a_rollout_that_expires_once(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, result_wait_sec=2.0, lease_sec=2.5) as server:
            token = await server.admitted("orphan", metadata={"sleep": 30})
            async with httpx.AsyncClient(base_url=server.url, timeout=0.3) as impatient:
                try:
                    await impatient.get("/rollout/orphan/result", headers={LEASE: token})
                except httpx.ReadTimeout:
                    pass  # the trainer hangs up while the server waits
            await asyncio.sleep(3.5)  # no poll renews the lease
            answer = (await server.poll("orphan", token)).json()
            assert answer["err_category"] == "lease_expired"
            healthy = await server.admitted("next", metadata={"sleep": 0.05})
            assert (await server.final("next", healthy))["status"] == "success"
            lines = await server.recorded(2)
        assert [line["rollout_id"] for line in lines].count("orphan") == 1
        (orphan,) = [line for line in lines if line["rollout_id"] == "orphan"]
        assert (orphan["status"], orphan["error_message"]) == ("cancelled", "polling lease expired")

    asyncio.run(scenario())


def test_a_thousand_rollouts_nobody_reads_expire_and_are_each_recorded_once(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with serving(
            tmp_path, concurrency=10, max_queued=1000, result_wait_sec=0.2, lease_sec=1.0
        ) as server:
            for index in range(1000):
                response = await server.submit(f"n{index}", metadata={"sleep": 30})
                assert response.status_code == 202
            lines = await server.recorded(1000, within=60)
            health = (await server.client.get("/health")).json()
        assert health["lease_expiries"] == 1000
        assert health["lifecycle"]["active_rollouts"] == 0
        assert sorted(line["rollout_id"] for line in lines) == sorted(f"n{i}" for i in range(1000))
        assert {line["error_message"] for line in lines} == {"polling lease expired"}

    asyncio.run(scenario())


def test_plain_display_prints_a_line_per_finished_rollout_and_counts_admissions(
    tmp_path: Path,
) -> None:
    shown = io.StringIO()

    async def scenario() -> None:
        display = ServedPlainDisplay(shown, interval_sec=0.0)
        display.start(0, "osmo-run serve")
        async with serving(tmp_path, display=display) as server:
            good = await server.admitted("good")
            bad = await server.admitted("bad", metadata={"raise": "RuntimeError"})
            await server.final("good", good)
            await server.final("bad", bad)
            await server.recorded(2)

    asyncio.run(scenario())
    text = shown.getvalue()
    assert "SUCCESS row good reward 1 in " in text
    assert "FAILURE row bad [agent_error, workflow]: RuntimeError: scripted RuntimeError" in text
    assert "finished: 2/2 done · 1 ok · 1 failed" in text
