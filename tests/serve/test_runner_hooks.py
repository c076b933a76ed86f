"""The runner API osmo-run serve codes against (``Runner.run`` over an async iterable,
``Runner.cancel``, ``on_recorded``), checked on the runner alone: whichever branch provides
the runner, these are the promises serve relies on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from osmo_run import AgentWorkflowConfig, ConcurrencyConfig, ExecutionRequest, ExecutionResult
from osmo_run.backends.local import LocalBackend
from osmo_run.run.executing.display import NullDisplay
from osmo_run.run.executing.runner import Runner, WorkItem
from osmo_run.run.reading.dataset import DatasetRow
from osmo_run.run.writing.output import OutputWriter
from osmo_run.serve.backend import ServedBackend
from osmo_run.serve.protocol import parse_rollout_request
from osmo_run.serve.rollouts import ServedRollouts, ServeSettings
from tests.conftest import read_jsonl
from tests.workflows import ScriptedWorkflow


def _item(index: int, **metadata: Any) -> WorkItem:
    request = ExecutionRequest(f"r{index}", [{"role": "user", "content": "hi"}], metadata=metadata)
    return WorkItem(DatasetRow(index, index, request.id, request), 0, request)


def test_an_async_source_is_drawn_only_while_a_slot_is_free_and_each_row_is_reported(
    tmp_path: Path,
) -> None:
    recorded: list[tuple[str, str, dict[str, Any]]] = []
    drawn: list[int] = []

    async def scenario() -> None:
        config = AgentWorkflowConfig(concurrency=ConcurrencyConfig(max_concurrent=2))
        backend = LocalBackend(ScriptedWorkflow, config)
        feed: asyncio.Queue[WorkItem | None] = asyncio.Queue()

        async def source() -> AsyncIterator[WorkItem]:
            while (item := await feed.get()) is not None:
                drawn.append(item.row.index)
                yield item

        def on_recorded(item: WorkItem, result: ExecutionResult, record: dict[str, Any]) -> None:
            recorded.append((item.rollout_id, result.status.value, record))

        with OutputWriter(tmp_path / "results.jsonl") as writer:
            runner = Runner(backend, writer, NullDisplay(), on_recorded=on_recorded)
            running = asyncio.create_task(runner.run(source()))
            for index in range(4):
                feed.put_nowait(_item(index, sleep=0.3))
            await asyncio.sleep(0.1)
            assert drawn == [0, 1]  # two slots: the third waits in the source, not the runner
            assert runner.cancel("r1", "the trainer cancelled it") is True
            assert runner.cancel("nobody", "no such rollout") is False
            await asyncio.sleep(0.5)
            feed.put_nowait(None)
            summary = await running
            assert runner.cancel("r0", "finished already") is False
        assert summary.total == 4
        await backend.aclose()

    asyncio.run(scenario())
    by_id = {rid: (status, record) for rid, status, record in recorded}
    assert sorted(by_id) == ["r0", "r1", "r2", "r3"]  # each reported once
    assert by_id["r1"][0] == "cancelled"
    assert by_id["r1"][1]["error_message"] == "the trainer cancelled it"
    assert {by_id[r][0] for r in ("r0", "r2", "r3")} == {"success"}
    lines = read_jsonl(tmp_path / "results.jsonl")
    assert [line["rollout_id"] for line in lines] == [rid for rid, _, _ in recorded]
    assert next(line for line in lines if line["rollout_id"] == "r1") == by_id["r1"][1]


def test_an_interrupt_ends_the_wait_for_the_next_item(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend = LocalBackend(ScriptedWorkflow)

        async def silent() -> AsyncIterator[WorkItem]:
            await asyncio.Event().wait()  # a source that never yields
            yield _item(0)

        with OutputWriter(tmp_path / "results.jsonl") as writer:
            runner = Runner(backend, writer, NullDisplay())
            running = asyncio.create_task(runner.run(silent()))
            await asyncio.sleep(0.1)
            runner.interrupt()
            summary = await asyncio.wait_for(running, 5)
        assert summary.interrupted and summary.total == 0
        await backend.aclose()

    asyncio.run(scenario())


def test_a_burst_of_admissions_all_start_within_a_few_loop_turns(tmp_path: Path) -> None:
    """The runner's free workers draw admitted rollouts without passing a lock from one to
    the next: a burst of 300 admissions is running a few event-loop turns later, not one
    rollout per turn (which, on a loaded server, kept ~950 of 1,000 admitted rollouts
    queued and the model endpoint at ~150 calls in flight)."""
    burst = 300

    async def scenario() -> None:
        rollouts = ServedRollouts(ServeSettings(max_queued=burst), lambda _secret: None)
        config = AgentWorkflowConfig(concurrency=ConcurrencyConfig(max_concurrent=burst))
        backend = ServedBackend(LocalBackend(ScriptedWorkflow, config), rollouts)
        with OutputWriter(tmp_path / "results.jsonl") as writer:
            runner = Runner(backend, writer, NullDisplay(), on_recorded=rollouts.recorded)
            rollouts.runner = runner
            running = asyncio.create_task(runner.run(rollouts))
            await asyncio.sleep(0.1)  # every worker waits for an admission
            for index in range(burst):
                body = {
                    "rollout_id": f"b-{index}",
                    "initial_messages": [{"role": "user", "content": "hi"}],
                    "chat_completions_url": "http://127.0.0.1:9/v1",
                    "metadata": {"sleep": 30},
                }
                rollouts.admit(parse_rollout_request(json.dumps(body).encode()))
            for _ in range(20):
                await asyncio.sleep(0)
            health = rollouts.health({})["concurrency"]
            assert (health["queued"], health["running"]) == (0, burst)
            rollouts.end()
            runner.interrupt()
            await asyncio.wait_for(running, 30)
        await backend.aclose()

    asyncio.run(scenario())
