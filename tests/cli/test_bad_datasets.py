"""Issue #15's bad input, each through ``osmo-run local``: one clear error with its position,
exit 2 and nothing run; or, for a bad row under ``--bad-rows record``, the row recorded as a
validation error and the rest run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from osmo_run.sdk.names import safe_name
from tests.conftest import CLI, error_lines, parquet_modules, read_jsonl

RUN = ("--workflow", "tests.workflows:EchoWorkflow")
Make = Callable[[Path], tuple[Path, tuple[str, ...]]]
"""Writes a dataset (and a spec) into the directory; returns it and the extra arguments."""


def _file(name: str, data: str | bytes) -> Make:
    def make(base: Path) -> tuple[Path, tuple[str, ...]]:
        path = base / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path, ()

    return make


def _not_parquet(data: str | bytes) -> Make:
    """``d.parquet`` holding ``data``: pyarrow is what says it is not Parquet."""
    write = _file("d.parquet", data)

    def make(base: Path) -> tuple[Path, tuple[str, ...]]:
        parquet_modules()
        return write(base)

    return make


def _parquet(name: str, rows: list[dict[str, object]], columns: tuple[str, ...] = ()) -> Make:
    """Rows as a Parquet file; with no rows, ``columns`` (strings) make its schema."""

    def make(base: Path) -> tuple[Path, tuple[str, ...]]:
        pa, pq = parquet_modules()  # a case that writes Parquet skips without the extra
        path = base / name
        if columns and not rows:
            table = pa.schema([(column, pa.string()) for column in columns]).empty_table()
        else:
            table = pa.Table.from_pylist(rows)
        pq.write_table(table, path)
        return path, ()

    return make


def _mapped(name: str, data: str, mapping: str) -> Make:
    def make(base: Path) -> tuple[Path, tuple[str, ...]]:
        path = base / name
        path.write_text(data)
        spec = base / "spec.yaml"
        spec.write_text(f"workflow: tests.workflows:EchoWorkflow\ndataset: {mapping}\n")
        return path, ("--spec", str(spec))

    return make


CLASH = safe_name("a/b")
WHOLE_FILE: list[tuple[str, Make, str]] = [
    ("parquet-not-parquet", _not_parquet("id,prompt\na,x\n"), ": not a Parquet file ("),
    ("parquet-empty-file", _not_parquet(b""), ": not a Parquet file ("),
    (
        "parquet-no-rows",
        _parquet("d.parquet", [], columns=("prompt",)),
        ": the dataset has no rows",
    ),
    (
        "csv-no-header",
        _file("d.csv", "q1,hi,4\nq2,yo,5\n"),
        ":1: the first line should be a header",
    ),
    (
        "csv-bad-quoting",
        _file("d.csv", 'id,prompt\na,"open\nb,x\n'),
        ":row 1 (line 3): not valid CSV",
    ),
    (
        "two-ids-one-safe-name",
        _file("d.jsonl", f'{{"id": "a/b", "prompt": "x"}}\n{{"id": "{CLASH}", "prompt": "y"}}\n'),
        f":2: id '{CLASH}' and id 'a/b' (line 1) have the same file name",
    ),
    (
        "mapping-unknown-csv-column",
        _mapped("d.csv", "uid,question\n1,hi\n", "{prompt: query}"),
        ": the spec's dataset.prompt names column 'query', which the file does not have; "
        "its columns are 'uid', 'question'",
    ),
]


@pytest.mark.parametrize(("name", "make", "error"), WHOLE_FILE, ids=[c[0] for c in WHOLE_FILE])
@pytest.mark.parametrize("bad_rows", ["stop", "record"])
def test_a_bad_file_stops_the_run_in_one_line(
    cli: CLI, tmp_path: Path, name: str, make: Make, error: str, bad_rows: str
) -> None:
    path, extra = make(tmp_path)
    output = tmp_path / "out.jsonl"
    args = (*RUN, *extra, "--bad-rows", bad_rows, "-o", output)
    proc = cli.local(path, *args)
    assert proc.returncode == 2, proc.stdout
    lines = error_lines(proc.stderr)
    assert lines[0].startswith(f"error: {path}{error}"), lines
    assert len(lines) <= 2  # the error, and for a row what to do: fix it or record it
    assert not output.exists()


BAD_ROW: list[tuple[str, Make, str]] = [
    (
        "csv-ragged-row",
        _file("d.csv", "id,prompt\na,x,extra\nb,fine\n"),
        ":row 1: has 3 fields but the header has 2",
    ),
    (
        "mapping-unknown-jsonl-column",
        _mapped("d.jsonl", '{"q": "x"}\n{"question": "fine"}\n', "{prompt: question}"),
        ":1: column 'question' is not in this row; its columns are 'q'",
    ),
    (
        "no-prompt-no-metadata",
        _file("d.jsonl", '{"label": "x"}\n{"prompt": "fine"}\n'),
        ":1: row has no prompt",
    ),
    (
        "empty-id",
        _file("d.jsonl", '{"id": "", "prompt": "x"}\n{"prompt": "fine"}\n'),
        ":1: 'id' is empty",
    ),
    (
        "jsonl-integer-of-5000-digits",
        _file("d.jsonl", '{"prompt": "x", "n": ' + "9" * 5000 + '}\n{"prompt": "fine"}\n'),
        ":1: not valid JSON (an integer of more than 4300 digits",
    ),
    (
        "csv-metadata-integer-of-5000-digits",
        _file("d.csv", 'prompt,metadata\nx,"{""n"": ' + "9" * 5000 + '}"\nfine,\n'),
        ":row 1: 'metadata' is a string but not valid JSON (an integer of more than 4300",
    ),
    (
        "csv-mapped-integer-of-5000-digits",
        _mapped(
            "d.csv",
            'q\n"{""text"": ""x"", ""n"": ' + "9" * 5000 + '}"\n"{""text"": ""fine""}"\n',
            "{prompt: q.text}",
        ),
        ":row 1: column 'q.text': not valid JSON (an integer of more than 4300 digits",
    ),
]


@pytest.mark.parametrize(("name", "make", "error"), BAD_ROW, ids=[c[0] for c in BAD_ROW])
def test_a_bad_row_stops_the_run_or_is_recorded(
    cli: CLI, tmp_path: Path, name: str, make: Make, error: str
) -> None:
    path, extra = make(tmp_path)
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, *extra, "-o", output)
    assert proc.returncode == 2, proc.stdout
    lines = error_lines(proc.stderr)
    assert lines[0].startswith(f"error: {path}{error}"), lines
    assert "nothing was run" in lines[1]
    assert not output.exists()
    proc = cli.local(path, *RUN, *extra, "--bad-rows", "record", "-o", output)
    assert proc.returncode == 1, proc.stderr  # the bad row is a failed rollout
    records = sorted(read_jsonl(output), key=lambda r: r["row_index"])
    assert [r["status"] for r in records] == ["failure", "success"]
    assert records[0]["error_category"] == "validation_error"
    assert records[0]["error_message"].startswith(f"{path}{error}")


@pytest.mark.parametrize("bad_id", ["null", '""', "1.5", "true"])
def test_a_row_with_a_bad_id_is_recorded_under_its_line_number(
    cli: CLI, tmp_path: Path, bad_id: str
) -> None:
    # "id": null once became the row "None", "" the row "": a name another row may have
    path = tmp_path / "d.jsonl"
    bad = f'{{"id": {bad_id}, "prompt": "x"}}'
    rows = ['{"prompt": "a"}', bad, '{"id": "None", "prompt": "y"}']
    path.write_text("\n".join(rows) + "\n")
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, "--bad-rows", "record", "-o", output)
    assert proc.returncode == 1, proc.stderr
    records = sorted(read_jsonl(output), key=lambda r: r["row_index"])
    assert [(r["row_id"], r["status"]) for r in records] == [
        ("1", "success"),
        ("2", "failure"),
        ("None", "success"),
    ]
    assert records[1]["error_message"].startswith(f"{path}:2: 'id' ")


def test_embedded_newlines_in_quoted_csv_fields_are_read_not_refused(
    cli: CLI, tmp_path: Path
) -> None:
    path = tmp_path / "d.csv"
    path.write_text('id,prompt\r\nmulti,"one\r\ntwo\nthree"\r\nnext,x\r\n')
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, "-o", output)
    assert proc.returncode == 0, proc.stderr
    records = {r["row_id"]: r for r in read_jsonl(output)}
    assert records["multi"]["sample"]["messages"][0]["content"] == "one\r\ntwo\nthree"
    assert (records["multi"]["line"], records["next"]["line"]) == (1, 2)


def test_empty_csv_cells_do_what_the_readme_says(cli: CLI, tmp_path: Path) -> None:
    # README, Datasets, CSV: an empty standard cell gives nothing, an empty id is a bad row,
    # any other empty cell is "" in the metadata
    path = tmp_path / "d.csv"
    path.write_text("id,prompt,label,metadata,topic\nq1,hi,,,\n,hi,4,,x\n")
    output = tmp_path / "out.jsonl"
    workflow = ("--workflow", "tests.workflows:MetadataEchoWorkflow")
    grader = ("--grader", "tests.workflows:LabelGrader")
    proc = cli.local(path, *workflow, *grader, "--bad-rows", "record", "-o", output)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    records = sorted(read_jsonl(output), key=lambda r: r["row_index"])
    assert records[0]["status"] == "success"
    assert records[0]["info"]["metadata"] == {"topic": ""}
    assert records[0]["grader_skipped"] == "row has no label"
    assert (records[1]["row_id"], records[1]["status"]) == ("2", "failure")
    assert (
        records[1]["error_message"] == f"{path}:row 2: 'id' is empty: give every row a "
        "non-empty id, or drop the id column"
    )
