"""The runner's worker pool and the hooks ``osmo-run serve`` builds on: items from an async
iterable, ``Runner.cancel`` of one rollout, ``on_recorded``, and a worker stuck in code
that ignores its deadline, replaced while only its row is blamed."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from osmo_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    ConcurrencyConfig,
    ExecutionResult,
)
from osmo_run.backends.local import LocalBackend
from osmo_run.run.executing.display import NullDisplay
from osmo_run.run.executing.runner import Runner, WorkItem, work_items
from osmo_run.run.reading.dataset import Dataset
from osmo_run.run.reporting.summary import RunSummary
from osmo_run.run.writing.output import OutputWriter
from osmo_run.sdk.deadlines import CANCEL_GRACE_SEC
from osmo_run.sdk.types import Message
from tests.conftest import Row, jsonl_bytes, read_jsonl
from tests.workflows import ScriptedGrader, ScriptedWorkflow, StubbornWorkflow, reply


class SettingsMutatingWorkflow(AgentWorkflow):
    """Answers with the settings it saw, then changes them: a list in place, a number,
    a new key."""

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        settings = self.config.settings
        seen = repr(sorted(settings.items()))
        for value in settings.values():
            if isinstance(value, list):
                value.append(ctx.rollout_id)
        settings["n"] += 1
        settings["added"] = ctx.rollout_id
        return reply(ctx, seen)


LEAKY: contextvars.ContextVar[str | None] = contextvars.ContextVar("leaky", default=None)


class ContextVarWorkflow(AgentWorkflow):
    """Answers with the value of a context variable it then sets (as tracing libraries
    do): a row that sees another row's value shares its context."""

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        seen = str(LEAKY.get())
        LEAKY.set(ctx.rollout_id)
        await asyncio.sleep(0)
        return reply(ctx, seen)


def _items(tmp_path: Path, rows: list[Row], agent_sec: float = 5) -> list[WorkItem]:
    path = tmp_path / "data.jsonl"
    path.write_bytes(jsonl_bytes(rows))
    dataset = Dataset(path, agent_timeout_sec=agent_sec, grader_timeout_sec=5)
    return list(work_items(dataset.rows()))


def _backend(concurrency: int, workflow: Any = ScriptedWorkflow) -> LocalBackend:
    config = AgentWorkflowConfig(ConcurrencyConfig(concurrency))
    return LocalBackend(workflow, config, ScriptedGrader)


def test_items_from_an_async_iterable_all_run_and_the_run_ends_with_it(tmp_path: Path) -> None:
    items = _items(tmp_path, [{"id": f"r{i}", "prompt": "hi", "label": "hi"} for i in range(7)])
    output = tmp_path / "out.jsonl"

    async def arriving() -> AsyncIterator[WorkItem]:
        for item in items:
            await asyncio.sleep(0.01)  # items trickle in, as a server's requests do
            yield item

    async def main() -> RunSummary:
        with OutputWriter(output) as writer:
            return await Runner(_backend(3), writer, NullDisplay()).run(arriving())

    summary = asyncio.run(main())
    lines = read_jsonl(output)
    assert sorted(line["row_id"] for line in lines) == [f"r{i}" for i in range(7)]
    assert {line["reward"] for line in lines} == {1.0}
    assert summary.total == 7


def test_cancel_records_that_rollout_once_with_the_reason_and_leaves_the_others(
    tmp_path: Path,
) -> None:
    rows: list[Row] = [
        {"id": "slow", "prompt": "hi", "label": "hi", "metadata": {"sleep": 30}},
        *({"id": f"ok{i}", "prompt": "hi", "label": "hi"} for i in range(4)),
    ]
    items = _items(tmp_path, rows)
    output = tmp_path / "out.jsonl"
    answers: list[bool] = []

    async def main() -> RunSummary:
        with OutputWriter(output) as writer:
            runner = Runner(_backend(2), writer, NullDisplay())
            loop = asyncio.get_running_loop()

            def cancel() -> None:
                answers.append(runner.cancel("slow", "stopped by user"))
                answers.append(runner.cancel("nobody", "x"))

            loop.call_later(0.3, cancel)
            return await runner.run(items)

    summary = asyncio.run(main())
    by_id = {line["row_id"]: line for line in read_jsonl(output)}
    assert len(read_jsonl(output)) == 5
    assert (by_id["slow"]["status"], by_id["slow"]["error_category"]) == ("cancelled", "cancelled")
    assert by_id["slow"]["error_message"] == "stopped by user"
    assert all(by_id[f"ok{i}"]["status"] == "success" for i in range(4))
    assert answers == [True, False]
    assert not summary.interrupted


def test_on_recorded_sees_each_rollout_once_with_its_record_as_written(tmp_path: Path) -> None:
    rows: list[Row] = [
        {"id": "a", "prompt": "hi", "label": "hi"},
        {"id": "b", "prompt": 42},
        {"id": "c", "prompt": "hi", "label": "hi", "metadata": {"raise": "RuntimeError"}},
    ]
    items = _items(tmp_path, rows)
    output = tmp_path / "out.jsonl"
    seen: list[tuple[str, str, dict[str, Any]]] = []

    def on_recorded(item: WorkItem, result: ExecutionResult, record: dict[str, Any]) -> None:
        seen.append((item.rollout_id, result.status.value, record))

    async def main() -> None:
        with OutputWriter(output) as writer:
            await Runner(_backend(2), writer, NullDisplay(), on_recorded=on_recorded).run(items)

    asyncio.run(main())
    written = {line["row_id"]: line for line in read_jsonl(output)}
    assert sorted(rollout for rollout, _, _ in seen) == ["a", "b", "c"]
    for rollout, status, record in seen:
        assert record == written[rollout]
        assert record["status"] == status


def test_a_row_that_ignores_its_deadline_is_left_behind_and_the_others_run_on(
    tmp_path: Path,
) -> None:
    """One worker, so the rows after the stubborn one run only if a fresh worker takes
    over; the stubborn row alone is a timeout, with the message of an abandoned phase."""
    rows: list[Row] = [
        {"id": "stubborn", "prompt": "hi", "metadata": {"stubborn_sec": 30}},
        *({"id": f"after{i}", "prompt": "hi", "metadata": {"stubborn_sec": 0}} for i in range(3)),
    ]
    items = _items(tmp_path, rows, agent_sec=0.2)
    output = tmp_path / "out.jsonl"
    StubbornWorkflow.release = False

    async def main() -> None:
        with OutputWriter(output) as writer:
            config = AgentWorkflowConfig(ConcurrencyConfig(1))
            backend = LocalBackend(StubbornWorkflow, config)
            await Runner(backend, writer, NullDisplay()).run(items)
        StubbornWorkflow.release = True

    try:
        asyncio.run(main())
    finally:
        StubbornWorkflow.release = False
    by_id = {line["row_id"]: line for line in read_jsonl(output)}
    assert len(by_id) == 4
    stubborn = by_id["stubborn"]
    assert (stubborn["status"], stubborn["error_category"]) == ("failure", "timeout")
    assert stubborn["error_message"] == (
        "workflow exceeded its 0.2s deadline (agent_timeout_sec) and ignored cancellation; "
        f"abandoned after {CANCEL_GRACE_SEC:g}s"
    )
    assert all(by_id[f"after{i}"]["status"] == "success" for i in range(3))


@pytest.mark.parametrize(
    "settings", [{"tools": ["a"], "n": 1}, {"tools": "a", "n": 1}], ids=["nested", "flat"]
)
def test_a_workflow_changing_its_settings_changes_no_other_rows(
    tmp_path: Path, settings: dict[str, Any]
) -> None:
    """Each row sees the spec's settings as they were, nested values included."""
    items = _items(tmp_path, [{"id": f"r{i}", "prompt": "hi"} for i in range(5)])
    output = tmp_path / "out.jsonl"
    before = repr(sorted(settings.items()))
    config = AgentWorkflowConfig(ConcurrencyConfig(1), settings=settings)

    async def main() -> None:
        with OutputWriter(output) as writer:
            backend = LocalBackend(SettingsMutatingWorkflow, config)
            await Runner(backend, writer, NullDisplay()).run(items)

    asyncio.run(main())
    seen = [line["sample"]["messages"][-1]["content"] for line in read_jsonl(output)]
    assert seen == [before] * 5
    assert repr(sorted(config.settings.items())) == before


def test_context_variables_a_row_sets_do_not_reach_the_next_row_of_its_worker(
    tmp_path: Path,
) -> None:
    items = _items(tmp_path, [{"id": f"r{i}", "prompt": "hi"} for i in range(4)])
    output = tmp_path / "out.jsonl"

    async def main() -> None:
        with OutputWriter(output) as writer:
            config = AgentWorkflowConfig(ConcurrencyConfig(1))  # one worker runs every row
            await Runner(LocalBackend(ContextVarWorkflow, config), writer, NullDisplay()).run(items)

    asyncio.run(main())
    seen = [line["sample"]["messages"][-1]["content"] for line in read_jsonl(output)]
    assert seen == ["None"] * 4


@pytest.mark.parametrize("concurrency", [1, 4])
def test_every_row_is_recorded_once_whatever_the_number_of_workers(
    tmp_path: Path, concurrency: int
) -> None:
    rows: list[Row] = [
        {"id": f"r{i}", "prompt": "hi", "label": "hi", "metadata": {"sleep": 0.001 * (i % 3)}}
        for i in range(40)
    ]
    items = _items(tmp_path, rows)
    output = tmp_path / "out.jsonl"

    async def main() -> RunSummary:
        with OutputWriter(output) as writer:
            return await Runner(_backend(concurrency), writer, NullDisplay()).run(items)

    summary = asyncio.run(main())
    lines = read_jsonl(output)
    assert sorted(line["row_id"] for line in lines) == sorted(f"r{i}" for i in range(40))
    assert summary.total == 40 and summary.by_status == {"success": 40}
