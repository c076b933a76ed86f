"""One record per rollout, built once, encoded once, masked only when a secret is in it;
and the summary a run counts from its results equals the one read back from its file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from osmo_run import (
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    RolloutSample,
    RolloutStatus,
)
from osmo_run.run.executing.display import NullDisplay
from osmo_run.run.executing.runner import Runner, WorkItem
from osmo_run.run.reading.dataset import DatasetRow
from osmo_run.run.reporting.summary import RunSummary, SummaryBuilder
from osmo_run.run.writing.output import OutputWriter
from osmo_run.run.writing.records import OutputRecord, record_dict, record_line
from osmo_run.run.writing.runfiles import iter_records
from osmo_run.sdk.types import LLMUsage, Phase, Timings
from osmo_run.testing import FakeBackend

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=10,
)
secrets = st.text(min_size=1, max_size=5) | st.sampled_from(
    ["1", "e", "0", ".", ":", ",", '"', "\\", "true", "null", "row_id", "status", "\n"]
)


def _result(
    row_id: str,
    text: str,
    info: dict[str, Any],
    failed: bool,
    usage: LLMUsage | None = None,
) -> ExecutionResult:
    if failed:
        result = ExecutionResult.failure(row_id, ErrorCategory.AGENT_ERROR, text, Phase.WORKFLOW)
    else:
        sample = RolloutSample(
            messages=[{"role": "assistant", "content": text}], metrics={"m": 0.5}, reward=0.25
        )
        result = ExecutionResult(row_id, RolloutStatus.SUCCESS, sample=sample, info=info)
        result.grader_skipped = text or None
    result.usage = usage
    result.timings = Timings(queued_sec=0.1234567891, workflow_sec=1.5, total_sec=2.1234567891)
    result.warnings = [text]
    return result


@settings(max_examples=150, deadline=None)
@given(
    row_id=st.text(min_size=1, max_size=8),
    text=st.text(max_size=16),
    info=st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    failed=st.booleans(),
    attempts=st.integers(min_value=1, max_value=3),
)
def test_the_record_is_the_results_fields_where_the_row_sits(
    row_id: str, text: str, info: dict[str, Any], failed: bool, attempts: int
) -> None:
    """The record built in one step holds exactly what ``to_dict`` says of the result,
    without its ``error_detail``, in the order the output file has always had."""
    result = _result(row_id, text, info, failed, LLMUsage(1, 2, 3, 0.1234567891))
    earlier = [
        {"attempt": n, "error_category": "timeout", "error_message": "slow", "error_phase": None}
        | {"total_sec": 1.0}
        for n in range(1, attempts)
    ]
    record = record_dict(row_id, 3, 7, result, 1, attempts, earlier, "name")
    data = result.to_dict()
    del data["error_detail"]
    place = {
        "schema_version": 1,
        "row_id": row_id,
        "rollout_id": data.pop("rollout_id"),
        "safe_name": "name",
        "row_index": 3,
        "sample_index": 1,
        "line": 7,
        "attempt": attempts,
        "attempts": earlier,
    }
    assert list(record) == [*place, *data]
    assert record == {**place, **data}
    OutputRecord.model_validate(json.loads(record_line(record)))


def _value_wise(writer: OutputWriter, record: dict[str, Any]) -> str:
    """The line as every record was written before encoding came first: all values
    masked, then encoded."""
    return record_line(writer.mask_record(record))


@settings(max_examples=300, deadline=None)
@given(
    secret=secrets,
    text=st.text(max_size=16),
    info=st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    failed=st.booleans(),
)
@example(secret="1", text="1", info={"1": 1.5}, failed=False)  # keys and numbers hold it
@example(secret='"', text='say "hi"', info={}, failed=False)  # written escaped: \"
@example(secret="\n", text="two\nlines", info={"k": ["a\nb"]}, failed=True)
@example(secret="*", text="a*b", info={}, failed=True)  # a secret inside the mask
def test_a_line_masked_after_encoding_is_the_value_wise_mask(
    tmp_path_factory: Any, secret: str, text: str, info: dict[str, Any], failed: bool
) -> None:
    """Whatever the secret (a digit, a quote, a key's name) and wherever it is (a value, a
    key, a number), the line written is the one masking each value and then encoding
    gives: no key, number or piece of JSON syntax changed, every value masked."""
    directory: Path = tmp_path_factory.mktemp("out")
    with OutputWriter(directory / "out.jsonl", (secret,)) as writer:
        result = _result("row-1", f"x{text}", info, failed)
        result.info = {**info, "said": text}
        record = record_dict("row-1", 0, 1, result)
        line = writer.record_line(record)
        assert line == _value_wise(writer, record)
        OutputRecord.model_validate(json.loads(line))


def test_a_value_json_cannot_hold_is_written_as_its_masked_repr(tmp_path: Path) -> None:
    class Token:
        def __repr__(self) -> str:
            return "Token('sk-live-123456')"

    with OutputWriter(tmp_path / "out.jsonl", ("sk-live-123456",)) as writer:
        result = _result("r", "fine", {"token": Token()}, False)
        line = writer.record_line(record_dict("r", 0, 1, result))
    assert json.loads(line)["info"] == {"token": "Token('***')"}


def _run(path: Path, results: dict[str, ExecutionResult], secret: str, samples: int) -> RunSummary:
    """Run one work item per result through the runner; its summary."""
    items = []
    for index, row_id in enumerate(results):
        request = ExecutionRequest(id=row_id, prompt=[{"role": "user", "content": "q"}])
        row = DatasetRow(index // samples, index // samples + 1, row_id, request)
        items.append(WorkItem(row, index % samples, request))

    async def main() -> RunSummary:
        with OutputWriter(path, (secret,)) as writer:
            backend = FakeBackend(lambda request: results[request.id])
            stats = SummaryBuilder(pass_threshold=0.5, samples_per_row=samples)
            return await Runner(backend, writer, NullDisplay(), stats=stats).run(items)

    return asyncio.run(main())


def test_a_runs_summary_equals_the_one_its_results_file_gives(tmp_path: Path) -> None:
    """The live summary counts each result as it is recorded; ``report``, ``regrade`` and
    ``--resume`` count the lines read back. Both ways, the same summary: statuses,
    categories, rewards, pass@k, durations (rounded as written), model usage, and the
    reasons rows were not graded as written (secrets masked)."""
    secret = "hunter22"
    results: dict[str, ExecutionResult] = {}
    for i in range(24):
        usage = LLMUsage(i % 3, 10 * i, i, 0.1 * i + 1e-9) if i % 4 else None
        result = _result(f"r{i}", f"text {i}", {}, failed=i % 5 == 0, usage=usage)
        result.timings.total_sec = 0.5 + i / 7 + 1e-9
        if result.sample is not None:
            result.sample.reward = [0.0, 0.25, 0.5, 1.0][i % 4]
            result.grader_skipped = f"no label, and {secret}" if i % 6 == 1 else None
            if result.grader_skipped is not None:
                result.sample.reward = None
        if i % 7 == 3:
            result.grader_usage = LLMUsage(1, 5, 5, 1 / 3)
        results[f"r{i}"] = result
    results["r9"] = ExecutionResult.failure("r9", ErrorCategory.TIMEOUT, "slow", Phase.WORKFLOW)
    output = tmp_path / "out.jsonl"
    live = _run(output, results, secret, samples=2)

    builder = SummaryBuilder(pass_threshold=0.5, samples_per_row=2)
    for record in iter_records(output):
        builder.add_record(record)
    read_back = builder.build(output=str(output))
    assert live.to_dict() == read_back.to_dict()
    assert secret not in json.dumps(live.to_dict())
    assert live.grader_skipped == {"no label, and ***": 4}


def test_a_cycle_in_a_results_metrics_or_info_is_a_validation_error(tmp_path: Path) -> None:
    """Encoding skips the per-row cycle check; a cycle is still caught and said as one."""
    looped: dict[str, Any] = {"a": 1}
    looped["self"] = looped
    listed: list[Any] = [1]
    listed.append(listed)
    results = {
        "info": _result("info", "ok", looped, False),
        "metrics": _result("metrics", "ok", {}, False),
        "fine": _result("fine", "ok", {"deep": [[[[{"x": 1}]]]]}, False),
    }
    assert results["metrics"].sample is not None
    results["metrics"].sample.metrics = {"turns": listed}  # type: ignore[dict-item]
    output = tmp_path / "out.jsonl"
    summary = _run(output, results, "a-secret", samples=1)
    by_id = {record["row_id"]: record for record in iter_records(output)}
    for row_id in ("info", "metrics"):
        record = OutputRecord.model_validate(by_id[row_id])
        assert (record.status, record.error_category) == ("failure", "validation_error")
        assert record.error_message is not None
        assert "Circular reference detected" in record.error_message
    assert by_id["fine"]["status"] == "success"
    assert by_id["fine"]["info"] == {"deep": [[[[{"x": 1}]]]]}
    assert summary.error_categories == {"validation_error": 2}


def test_a_result_its_backend_delivered_is_unchanged_by_recording(tmp_path: Path) -> None:
    """The runner records a copy: the result a backend delivered (and a callback may keep)
    keeps its own time, its unmasked error and its warnings; the file has the recorded
    one, timed and masked."""
    secret = "hunter22"
    failed = ExecutionResult.failure(
        "failed", ErrorCategory.AGENT_ERROR, f"RuntimeError: {secret}\nline two", Phase.WORKFLOW
    )
    untimed = _result("untimed", "fine", {}, False)
    untimed.timings.total_sec = 0.0
    delivered = {"failed": failed, "untimed": untimed}
    before = {row_id: result.to_dict() for row_id, result in delivered.items()}
    output = tmp_path / "out.jsonl"
    _run(output, delivered, secret, samples=1)

    assert {row_id: result.to_dict() for row_id, result in delivered.items()} == before
    assert secret in (failed.error_message or "") and failed.timings.total_sec == 0.0
    assert failed.backend.error_log is None
    by_id = {record["row_id"]: record for record in iter_records(output)}
    assert by_id["failed"]["error_message"] == "RuntimeError: ***"
    assert by_id["failed"]["backend"]["error_log"] is not None
    assert all(record["timings"]["total_sec"] > 0 for record in by_id.values())
