"""The runner: every row recorded once, a bounded window, interrupts and broken pieces."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from osmo_run import (
    AgentWorkflow,
    AgentWorkflowConfig,
    ConcurrencyConfig,
    ExecutionRequest,
    ExecutionResult,
    Grader,
)
from osmo_run.backends.base import ExecutionBackend
from osmo_run.backends.local import LocalBackend
from osmo_run.errors import OutputError
from osmo_run.run.executing.display import NullDisplay
from osmo_run.run.executing.runner import Runner, work_items
from osmo_run.run.reading.dataset import Dataset
from osmo_run.run.reporting.summary import RunSummary
from osmo_run.run.writing.output import OutputWriter
from osmo_run.run.writing.records import OutputRecord
from osmo_run.testing import FakeBackend
from tests.conftest import Row, jsonl_bytes, read_jsonl
from tests.workflows import ScriptedGrader, ScriptedWorkflow


class RecordingDisplay(NullDisplay):
    """Remembers the rows started and finished, and the most ever in flight."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.peak_in_flight = 0

    def row_started(self, row_id: str) -> None:
        self.started.append(row_id)
        self.peak_in_flight = max(self.peak_in_flight, len(self.started) - len(self.finished))

    def row_finished(self, result: ExecutionResult) -> None:
        self.finished.append(result.rollout_id)


def _run(
    tmp_path: Path,
    rows: list[Row],
    backend: ExecutionBackend | None = None,
    *,
    workflow: type[AgentWorkflow] = ScriptedWorkflow,
    grader: type[Grader] | None = ScriptedGrader,
    concurrency: int = 4,
    display: NullDisplay | None = None,
    interrupt_after: float | None = None,
    writer: OutputWriter | None = None,
) -> tuple[RunSummary, list[dict[str, Any]]]:
    dataset_path = tmp_path / "data.jsonl"
    dataset_path.write_bytes(jsonl_bytes(rows))
    dataset = Dataset(dataset_path, agent_timeout_sec=5, grader_timeout_sec=5)
    config = AgentWorkflowConfig(ConcurrencyConfig(concurrency))
    backend = backend or LocalBackend(workflow, config, grader)
    output = tmp_path / "out.jsonl"

    async def main() -> RunSummary:
        with writer or OutputWriter(output) as out:
            runner = Runner(backend, out, display or NullDisplay())
            if interrupt_after is not None:
                asyncio.get_running_loop().call_later(interrupt_after, runner.interrupt)
            return await runner.run(work_items(dataset.rows()))

    summary = asyncio.run(main())
    return summary, read_jsonl(output) if output.exists() else []


MIXED: list[Row] = [
    {"id": "ok", "prompt": "hi", "label": "hi"},
    {"id": "wrong", "prompt": "hi", "label": "bye"},
    {"id": "boom", "prompt": "hi", "label": "hi", "metadata": {"raise": "RuntimeError"}},
    {"id": "unlabeled", "prompt": "hi"},
    {"id": "bad", "prompt": 42},
    {"id": "nogrand", "prompt": "hi", "label": "hi", "metadata": {"grade": "none"}},
]


def test_every_row_is_written_once_as_a_valid_record(tmp_path: Path) -> None:
    summary, lines = _run(tmp_path, MIXED)
    assert len(lines) == len(MIXED)
    records = {r.row_id: r for r in (OutputRecord.model_validate(line) for line in lines)}
    assert set(records) == {"ok", "wrong", "boom", "unlabeled", "bad", "nogrand"}
    assert [(records[i].row_index, records[i].line) for i in ("ok", "bad")] == [(0, 1), (4, 5)]
    assert (records["ok"].status, records["ok"].reward) == ("success", 1.0)
    assert (records["wrong"].status, records["wrong"].reward) == ("success", 0.0)
    assert (records["boom"].error_category, records["boom"].error_phase) == (
        "agent_error",
        "workflow",
    )
    assert records["unlabeled"].grader_skipped == "row has no label"
    bad = records["bad"]
    assert (bad.status, bad.error_category, bad.error_phase) == (
        "failure",
        "validation_error",
        "setup",
    )
    assert bad.error_message is not None and ":5: 'prompt' must be a list of messages" in (
        bad.error_message
    )
    nogrand = records["nogrand"]
    assert (nogrand.error_category, nogrand.error_phase) == ("validation_error", "grader")
    assert nogrand.sample is not None and nogrand.sample.messages
    assert summary.total == len(MIXED)


def test_summary_counts_match_the_output_file(tmp_path: Path) -> None:
    summary, lines = _run(tmp_path, MIXED)
    assert summary.by_status == dict(Counter(line["status"] for line in lines))
    categories = Counter(line["error_category"] for line in lines if line["error_category"])
    assert summary.error_categories == dict(categories)
    assert summary.graded == sum(1 for line in lines if line["reward"] is not None)
    assert summary.mean_reward_all == pytest.approx(1.0 / len(MIXED))
    assert summary.mean_reward_graded == pytest.approx(0.5)


def test_rows_in_flight_never_exceed_the_backends_concurrency(tmp_path: Path) -> None:
    display = RecordingDisplay()
    rows: list[Row] = [{"prompt": "x", "metadata": {"sleep": 0.01}} for _ in range(30)]
    _, lines = _run(tmp_path, rows, concurrency=3, display=display)
    assert len(lines) == 30
    assert display.peak_in_flight == 3


def test_interrupt_records_rows_in_flight_as_cancelled_and_dispatches_no_more(
    tmp_path: Path,
) -> None:
    rows: list[Row] = [
        {"id": "fast-1", "prompt": "x"},
        {"id": "fast-2", "prompt": "x"},
        *({"id": f"slow-{i}", "prompt": "x", "metadata": {"sleep": 30}} for i in range(4)),
    ]
    summary, lines = _run(tmp_path, rows, concurrency=2, interrupt_after=0.2)
    by_id = {line["row_id"]: line for line in lines}
    assert set(by_id) == {"fast-1", "fast-2", "slow-0", "slow-1"}
    assert by_id["fast-1"]["status"] == "success"
    for row_id in ("slow-0", "slow-1"):
        assert by_id[row_id]["status"] == "cancelled"
        assert by_id[row_id]["error_category"] == "cancelled"
        assert by_id[row_id]["error_message"] == "the run was interrupted before this row finished"
    assert summary.interrupted
    assert summary.by_status == {"success": 2, "cancelled": 2}


def test_result_that_json_cannot_hold_becomes_a_validation_error(tmp_path: Path) -> None:
    rows: list[Row] = [
        {"id": "nan", "prompt": "x", "metadata": {"returns": "nan_message"}},
        {"id": "fine", "prompt": "x"},
    ]
    summary, lines = _run(tmp_path, rows, grader=None)
    by_id = {line["row_id"]: line for line in lines}
    assert by_id["fine"]["status"] == "success"
    nan = OutputRecord.model_validate(by_id["nan"])
    assert (nan.status, nan.error_category, nan.error_phase) == (
        "failure",
        "validation_error",
        "workflow",
    )
    assert nan.error_message is not None and "cannot be written as JSON" in nan.error_message
    assert summary.error_categories == {"validation_error": 1}


class FailingWriter(OutputWriter):
    """Fails like a full disk on the third write."""

    def write(self, line: str) -> None:
        if self.lines_written == 2:
            raise OutputError(f"{self.path}: writing a result failed: No space left on device")
        super().write(line)


def test_failed_write_stops_the_run_and_raises(tmp_path: Path) -> None:
    display = RecordingDisplay()
    rows: list[Row] = [{"prompt": "x"} for _ in range(10)]
    with pytest.raises(OutputError, match="No space left on device"):
        _run(
            tmp_path,
            rows,
            concurrency=1,
            display=display,
            writer=FailingWriter(tmp_path / "out.jsonl"),
        )
    assert len(read_jsonl(tmp_path / "out.jsonl")) == 2
    assert len(display.started) == 3


def _broken(request: ExecutionRequest) -> None:
    """Raises for rows whose prompt is ``raise``; returns without a result otherwise."""
    if request.prompt[0]["content"] == "raise":
        raise RuntimeError("backend exploded")


def test_backend_bugs_become_internal_error_rows(tmp_path: Path) -> None:
    rows: list[Row] = [{"id": "a", "prompt": "raise"}, {"id": "b", "prompt": "silent"}]
    _, lines = _run(tmp_path, rows, FakeBackend(_broken, max_concurrency=2))
    by_id = {line["row_id"]: line for line in lines}
    assert by_id["a"]["error_category"] == "internal_error"
    assert by_id["a"]["error_message"] == "the backend failed: RuntimeError: backend exploded"
    assert by_id["b"]["error_category"] == "internal_error"
    assert "backend returned without a result" in by_id["b"]["error_message"]
