"""Parquet columns of every Arrow type a dataset holds: dates, times, timestamps and decimals
reach the workflow as text (JSON, so a worker process or a Harbor trial gets them too);
categorical (dictionary), view and fixed-size columns are read as what they hold; a binary
column is refused before any row runs."""

from __future__ import annotations

import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from tests.conftest import CLI, error_lines, read_jsonl, require_extra

pa = require_extra("pyarrow", "parquet")
pq = require_extra("pyarrow.parquet", "parquet")

RUN = ("--workflow", "tests.workflows:MetadataEchoWorkflow")


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_dates_times_timestamps_and_decimals_reach_the_workflow_as_text(
    cli: CLI, tmp_path: Path, isolation: str
) -> None:
    path = tmp_path / "d.parquet"
    table = pa.table(
        {
            "prompt": ["a", "b"],
            "day": [datetime.date(2024, 1, 2), None],
            "at": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5)] * 2, pa.timestamp("s")),
            "clock": [datetime.time(6, 7, 8), datetime.time(0, 0)],
            "price": [Decimal("1.50"), Decimal("-0.25")],
            "nested": [{"when": datetime.date(2023, 5, 6)}, {"when": None}],
        }
    )
    pq.write_table(table, path)
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, "--isolation", isolation, "-o", output)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = sorted(read_jsonl(output), key=lambda r: r["row_index"])
    assert [r["status"] for r in records] == ["success", "success"]
    assert records[0]["info"]["metadata"] == {
        "day": "2024-01-02",
        "at": "2024-01-02 03:04:05.000",  # Parquet keeps seconds as milliseconds
        "clock": "06:07:08.000000",
        "price": "1.50",
        "nested": {"when": "2023-05-06"},
    }
    assert records[1]["info"]["metadata"]["day"] is None
    assert records[1]["info"]["metadata"]["price"] == "-0.25"


@pytest.mark.parametrize(
    "column",
    [
        pa.array([b"\x00\xff", b"x"]),
        pa.array([b"ab", b"cd"], pa.binary(2)),
        pa.array([[b"x"], []], pa.list_(pa.large_binary())),
    ],
    ids=["binary", "fixed-size-binary", "list-of-binary"],
)
def test_a_binary_column_is_refused_before_any_row_runs(
    cli: CLI, tmp_path: Path, column: pa.Array
) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"prompt": ["a", "b"], "blob": column}), path)
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, "--bad-rows", "record", "-o", output)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {path}: column 'blob' is "), lines
    assert "convert the column to strings" in lines[0]
    assert not output.exists()


def _categorical_ids(path: Path) -> None:
    ids = pa.array(["q1", "q2"]).dictionary_encode()
    pq.write_table(pa.table({"id": ids, "prompt": ["a", "b"]}), path)


def _categorical_prompts(path: Path) -> None:
    prompts = pa.array(["a", "b"]).dictionary_encode()
    pq.write_table(pa.table({"id": ["q1", "q2"], "prompt": prompts}), path)


def _fixed_size_messages(path: Path) -> None:
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    messages = pa.array(
        [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
        pa.list_(message, 1),
    )
    pq.write_table(pa.table({"id": ["q1", "q2"], "messages": messages}), path)


def _view_columns(path: Path) -> None:
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    messages = pa.array(
        [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
        pa.list_view(message),
    )
    ids = pa.array(["q1", "q2"], pa.string_view())
    pq.write_table(pa.table({"id": ids, "messages": messages}), path)


@pytest.mark.parametrize(
    "write",
    [_categorical_ids, _categorical_prompts, _fixed_size_messages, _view_columns],
    ids=["dictionary-ids", "dictionary-prompts", "fixed-size-list-messages", "views"],
)
def test_categorical_and_fixed_size_columns_are_read(
    cli: CLI, tmp_path: Path, write: object
) -> None:
    path = tmp_path / "d.parquet"
    assert callable(write)
    write(path)
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, "-o", output)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = sorted(read_jsonl(output), key=lambda r: r["row_index"])
    assert [(r["row_id"], r["status"]) for r in records] == [("q1", "success"), ("q2", "success")]
    assert [r["sample"]["messages"][0]["content"] for r in records] == ["a", "b"]
