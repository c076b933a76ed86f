"""CSV and Parquet datasets: the same rows and checks as JSONL, with ``file:row`` positions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from osmo_run.errors import DatasetError
from osmo_run.run.reading.dataset import Dataset, DatasetRow
from osmo_run.run.reading.readers import choose_format
from tests.conftest import parquet_modules


def _rows(path: Path, **kwargs: Any) -> list[DatasetRow]:
    return list(Dataset(path, **kwargs).rows())


def _csv(tmp_path: Path, text: str | bytes, name: str = "data.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def _parquet(
    tmp_path: Path, rows: list[dict[str, Any]], name: str = "data.parquet", **kw: Any
) -> Path:
    pa, pq = parquet_modules()
    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(rows), path, **kw)
    return path


def _refused(path: Path, **kwargs: Any) -> str:
    with pytest.raises(DatasetError) as info:
        Dataset(path, **kwargs).validate(stop_on_error=True)
    return str(info.value).splitlines()[0]


def test_format_follows_the_extension_unless_given(tmp_path: Path) -> None:
    assert choose_format(Path("a.csv")) == "csv"
    assert choose_format(Path("a.PARQUET")) == "parquet"
    assert choose_format(Path("a.pq")) == "parquet"
    assert choose_format(Path("a.jsonl")) == "jsonl"
    assert choose_format(Path("a.txt")) == "jsonl"
    assert choose_format(Path("a.txt"), "csv") == "csv"
    assert choose_format(Path("a.csv"), "auto") == "csv"


# --------------------------------------------------------------------------- CSV


def test_csv_rows_become_requests_with_quoting_newlines_and_crlf(tmp_path: Path) -> None:
    path = _csv(
        tmp_path,
        "\ufeffid,prompt,label,source\r\n"
        'a/1,"What is 2+2, really?",4,gsm\r\n'
        '"b""2","two\r\nlines",,web\r\n'
        "\r\n"
        "c,,5,meta-only\r\n",
    )
    rows = _rows(path)
    assert [r.error for r in rows] == [None, None, None]
    first, second, third = (r.request for r in rows)
    assert first is not None and second is not None and third is not None
    assert (first.id, first.prompt, first.label) == (
        "a/1",
        [{"role": "user", "content": "What is 2+2, really?"}],
        "4",
    )
    assert first.metadata == {"source": "gsm"}
    assert second.id == 'b"2' and second.prompt[0]["content"] == "two\r\nlines"
    assert second.label is None  # an empty cell is no label
    assert third.prompt == [] and third.metadata == {"source": "meta-only"}
    assert [r.line for r in rows] == [1, 2, 3]  # row numbers, the header not counted


def test_csv_without_ids_is_named_by_row_number_and_decodes_json_cells(tmp_path: Path) -> None:
    path = _csv(
        tmp_path,
        'messages,metadata\n"[{""role"": ""user"", ""content"": ""hi""}]","{""n"": 1}"\n',
    )
    (row,) = _rows(path)
    assert row.request is not None
    assert (row.row_id, row.request.prompt, row.request.metadata) == (
        "1",
        [{"role": "user", "content": "hi"}],
        {"n": 1},
    )


def test_csv_without_a_header_is_refused_naming_the_columns_it_reads(tmp_path: Path) -> None:
    path = _csv(tmp_path, "q1,What is 2+2?,4\nq2,What is 3+3?,6\n")
    message = _refused(path)
    assert message.startswith(f"{path}:1: the first line should be a header naming the columns")
    assert "'q1', 'What is 2+2?', '4'" in message
    assert "add a header line, or map the columns" in message


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("id,prompt\na,x\nb,y,extra\n", "row 2: has 3 fields but the header has 2"),
        ("id,prompt\na,x\nb\n", "row 2: has 1 fields but the header has 2"),
        ("id,prompt\na,x\n,y\n", "row 2: 'id' is empty"),
        ("id,prompt,label\na,x,1\nb,,2\n", "row 2: 'prompt' is empty and no metadata"),
        (b"id,prompt\na,x\nb,caf\xe9\n", "row 2: column 'prompt' is not valid UTF-8"),
        (
            'id,messages\na,"[{""role"": ""user""}]"\nb,not json\n',
            "row 2: 'messages' in a CSV cell must be a JSON list",
        ),
    ],
)
def test_bad_csv_rows_name_file_and_row(tmp_path: Path, text: str | bytes, reason: str) -> None:
    path = _csv(tmp_path, text)
    assert _refused(path).startswith(f"{path}:{reason}")
    rows = _rows(path)  # --bad-rows record: the row is recorded, the others run
    assert [r.error is None for r in rows] == [True, False]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", ": the dataset has no rows (not even a header line)"),
        ("id,prompt\n", ": the dataset has no rows"),
        ("id,,label\na,x,1\n", ":1: header column 2 has no name"),
        ("id,prompt,id\na,x,1\n", ":1: header names column 'id' twice"),
        ('id,prompt\na,"never closed\nb,x\n', ":row 1 (line 3): not valid CSV"),
    ],
)
def test_unreadable_csv_files_are_refused(tmp_path: Path, text: str, reason: str) -> None:
    path = _csv(tmp_path, text)
    assert _refused(path).startswith(f"{path}{reason}")


def test_a_duplicate_csv_id_names_both_rows(tmp_path: Path) -> None:
    path = _csv(tmp_path, "id,prompt\na,x\nb,y\na,z\n")
    assert _refused(path) == f"{path}:row 3: duplicate id 'a' (first at row 1); ids must be unique"


# --------------------------------------------------------------------------- Parquet


def test_parquet_rows_with_nested_columns_become_requests(tmp_path: Path) -> None:
    rows = [
        {
            "id": i,
            "prompt": [{"role": "user", "content": f"q{i}"}],
            "label": str(i),
            "extra": {"split": "train", "index": i},
        }
        for i in range(2500)
    ]
    path = _parquet(tmp_path, rows, row_group_size=1000)  # three row groups
    _, pq = parquet_modules()
    assert pq.ParquetFile(path).num_row_groups == 3
    read = _rows(path)
    assert len(read) == 2500 and all(r.error is None for r in read)
    last = read[-1].request
    assert last is not None
    assert (last.id, last.prompt, last.label) == ("2499", rows[-1]["prompt"], "2499")
    assert last.metadata == {"extra": {"split": "train", "index": 2499}}
    assert [r.line for r in read[:2]] == [1, 2]
    assert Dataset(path, limit=10).validate(stop_on_error=True) == (10, [])


def test_a_parquet_column_of_the_wrong_type_is_refused_naming_it(tmp_path: Path) -> None:
    path = _parquet(tmp_path, [{"id": "a", "prompt": 3}, {"id": "b", "prompt": 4}])
    assert _refused(path) == (
        f"{path}: column 'prompt' is int64 in the Parquet schema, but the prompt must be text "
        "or a list of messages: convert the column, or map another one"
    )
    path = _parquet(tmp_path, [{"id": 1.5, "prompt": "x"}], name="float-id.parquet")
    assert "column 'id' is double in the Parquet schema" in _refused(path)
    # a value of a valid type can still be wrong: that row alone is bad
    rows = [{"prompt": [{"content": "x"}]}, {"prompt": [{"role": "user", "content": "y"}]}]
    path = _parquet(tmp_path, rows, name="r.parquet")
    assert _refused(path) == f"{path}:row 1: 'prompt[0]' has no string 'role'"


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    parquet_modules()  # pyarrow is what says it is not Parquet
    path = tmp_path / "data.parquet"
    path.write_text('{"prompt": "I am JSONL"}\n')
    message = _refused(path)
    assert message.startswith(f"{path}: not a Parquet file (")
    assert message.endswith("name it .jsonl or .csv or pass --dataset-format")
    assert len(_rows(path, fmt="jsonl")) == 1  # the override reads it as what it is


def test_an_empty_parquet_file_is_refused(tmp_path: Path) -> None:
    pa, pq = parquet_modules()
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    assert _refused(empty).startswith(f"{empty}: not a Parquet file (")
    schema = pa.schema([("id", pa.string()), ("prompt", pa.string())])
    no_rows = tmp_path / "no-rows.parquet"
    pq.write_table(schema.empty_table(), no_rows)
    assert _refused(no_rows) == f"{no_rows}: the dataset has no rows"


def test_a_truncated_parquet_file_is_refused(tmp_path: Path) -> None:
    path = _parquet(tmp_path, [{"prompt": "x" * 100}] * 100)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + data[-8:])  # footer kept, pages cut
    assert "not a Parquet file" in _refused(path) or "cannot be read" in _refused(path)


def test_parquet_without_pyarrow_names_the_pip_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from osmo_run.errors import BackendUnavailable

    path = _parquet(tmp_path, [{"prompt": "x"}])
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if the extra were not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(BackendUnavailable) as info:
        Dataset(path).validate(stop_on_error=True)
    assert str(info.value) == (
        f"{path}: reading Parquet needs pyarrow: pip install 'osmo-run[parquet]'"
    )
