"""Parquet columns of every Arrow type a dataset holds: categorical (dictionary), view and
fixed-size columns are read as what they hold."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import CLI, read_jsonl

RUN = ("--workflow", "tests.workflows:MetadataEchoWorkflow")


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
