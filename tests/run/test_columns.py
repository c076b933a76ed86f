"""Column mapping (the spec's ``dataset`` section): roles read from the columns it names."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from osmo_run.errors import DatasetError
from osmo_run.run.reading.columns import ColumnMap, column_map
from osmo_run.run.reading.dataset import Dataset
from osmo_run.sdk.types import ExecutionRequest
from tests.conftest import WriteJsonl, parquet_modules


def _requests(path: Path, columns: ColumnMap) -> list[ExecutionRequest]:
    rows = list(Dataset(path, columns=columns).rows())
    assert all(row.error is None for row in rows), [row.error for row in rows]
    return [row.request for row in rows if row.request is not None]


def _refused(path: Path, columns: ColumnMap) -> str:
    with pytest.raises(DatasetError) as info:
        Dataset(path, columns=columns).validate(stop_on_error=True)
    return str(info.value).splitlines()[0]


def test_named_columns_play_the_roles(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl(
        [
            {
                "uid": "g/1",
                "question": "2+2?",
                "answer": "4",
                "source": "gsm",
                "difficulty": 1,
                "x": 0,
            }
        ]
    )
    columns = column_map(
        None, id="uid", prompt="question", label="answer", metadata=["source", "difficulty"]
    )
    (request,) = _requests(path, columns)
    assert (request.id, request.label) == ("g/1", "4")
    assert request.prompt == [{"role": "user", "content": "2+2?"}]
    assert request.metadata == {"source": "gsm", "difficulty": 1}  # only the listed ones


def test_without_a_metadata_list_the_other_columns_are_the_metadata(
    write_jsonl: WriteJsonl,
) -> None:
    path = write_jsonl(
        [{"q": "hi", "a": "x", "prompt": "not the prompt", "metadata": {"k": 1}, "extra": 2}]
    )
    (request,) = _requests(path, column_map(None, prompt="q", label="a"))
    assert request.prompt == [{"role": "user", "content": "hi"}]
    assert request.label == "x"
    # the standard prompt column, whose role went to q, is kept under its name
    assert request.metadata == {"k": 1, "extra": 2, "prompt": "not the prompt"}
    assert request.id == "1"  # no id mapped and no id column: the line number


def test_dotted_paths_reach_into_nested_columns_and_lists(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl(
        [
            {
                "turns": [{"role": "user", "content": "first"}],
                "reward_model": {"style": "rule", "ground_truth": "42"},
                "meta": {"ids": ["a", "b"]},
            }
        ]
    )
    columns = column_map(None, prompt="turns.0.content", label="reward_model.ground_truth")
    columns = column_map(None, **{**columns.__dict__, "id": "meta.ids.1"})
    (request,) = _requests(path, columns)
    assert (request.id, request.label) == ("b", "42")
    assert request.prompt == [{"role": "user", "content": "first"}]
    assert request.metadata["reward_model"] == {"style": "rule", "ground_truth": "42"}


def test_a_system_prompt_column_goes_with_a_text_prompt(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([{"sys": "Be brief.", "q": "2+2?"}])
    (request,) = _requests(path, column_map(None, prompt="q", system_prompt="sys"))
    assert request.prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
    ]


def test_a_jsonl_row_without_a_mapped_column_is_a_bad_row_naming_it(
    write_jsonl: WriteJsonl,
) -> None:
    path = write_jsonl([{"question": "a", "answer": "b"}, {"quest": "c", "answer": "d"}])
    columns = column_map(None, prompt="question", label="answer")
    assert _refused(path, columns) == (
        f"{path}:2: column 'question' is not in this row; its columns are 'quest', 'answer'"
    )
    path = write_jsonl([{"q": "a", "rm": {"truth": "b"}}], name="nested.jsonl")
    message = _refused(path, column_map(None, prompt="q", label="rm.ground_truth"))
    assert message == f"{path}:1: column 'rm.ground_truth' is not in this row: 'rm' has 'truth'"


def test_a_csv_or_parquet_file_without_a_mapped_column_is_refused_before_any_row(
    tmp_path: Path,
) -> None:
    csv_path = tmp_path / "data.csv"
    csv_path.write_text("uid,question,answer\n1,a,b\n")
    columns = column_map(None, id="uid", prompt="question", label="solution")
    assert _refused(csv_path, columns) == (
        f"{csv_path}: the spec's dataset.label names column 'solution', which the file does "
        "not have; its columns are 'uid', 'question', 'answer'"
    )
    pa, pq = parquet_modules()  # the CSV half above runs without the extra
    parquet_path = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist([{"q": "a", "rm": {"truth": "b"}}]), parquet_path)
    message = _refused(parquet_path, column_map(None, prompt="question"))
    assert message.endswith(
        "names column 'question', which the file does not have; its columns are 'q', 'rm'"
    )


def _verl_rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
            "extra_info": {"split": "train", "index": i},
        }
        for i in range(n)
    ]


def test_the_verl_preset_reads_verl_parquet_rows(tmp_path: Path) -> None:
    pa, pq = parquet_modules()
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(_verl_rows(3)), path)
    requests = _requests(path, column_map("verl"))
    assert [r.label for r in requests] == ["0", "2", "4"]
    assert requests[2].prompt == [{"role": "user", "content": "What is 2 + 2?"}]
    assert requests[2].id == "3"  # verl rows have no id: the row number
    assert requests[2].metadata == {
        "data_source": "openai/gsm8k",
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "4"},
        "extra_info": {"split": "train", "index": 2},
    }
    with_ids = _requests(path, column_map("verl", id="extra_info.index"))
    assert [r.id for r in with_ids] == ["0", "1", "2"]


def test_a_csv_cell_holding_json_can_be_entered_by_a_dotted_path(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text('q,reward_model\nhi,"{""ground_truth"": ""7""}"\n')
    (request,) = _requests(path, column_map(None, prompt="q", label="reward_model.ground_truth"))
    assert request.label == "7"


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ColumnMap)])
def test_a_mapping_naming_any_one_field_is_not_empty(field: str) -> None:
    value: object = ("source",) if field == "metadata" else "col"
    assert ColumnMap().is_empty()
    assert not ColumnMap(**{field: value}).is_empty()
