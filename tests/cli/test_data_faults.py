"""Issue 27's dataset faults through the real CLI: a recorded bad row never takes a real
row's id (so ``--retry-errors`` never replaces a good result), shards refuse the ids the
whole file refuses, Parquet columns are refused or read as JSON like CSV's, and
``validate`` refuses a malformed CSV header in one line, as ``local`` does."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import CLI, REPO, error_lines, parquet_modules, read_jsonl

RUN = ("--workflow", "tests.workflows:EchoWorkflow", "--grader", "tests.workflows:LabelGrader")


def _row(row_id: object) -> str:
    return json.dumps({"id": row_id, "prompt": "a", "label": "a"})


# ------------------------------------------------------------------ bad rows' ids (item 3)


def test_a_recorded_bad_row_never_takes_a_real_rows_id_and_retry_errors_keeps_it(
    cli: CLI, tmp_path: Path
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join([_row(0), _row(1), "{nope", _row(2), _row(3)]) + "\n")
    output = tmp_path / "run" / "results.jsonl"
    args = (*RUN, "--bad-rows", "record", "-o", output, "--display", "plain")
    assert cli.local(path, *args).returncode == 1
    records = read_jsonl(output)
    ids = [r["row_id"] for r in records]
    assert Counter(ids).most_common(1)[0][1] == 1, f"two rows recorded as one id: {ids}"
    (bad,) = [r for r in records if r["status"] == "failure"]
    assert bad["line"] == 3 and bad["row_id"] not in {"0", "1", "2", "3"}

    proc = cli.local(path, *args, "--retry-errors")
    assert proc.returncode == 1, proc.stderr  # the bad row fails again
    records = read_jsonl(output)
    assert sorted(r["row_id"] for r in records if r["status"] == "success") == [
        "0",
        "1",
        "2",
        "3",
    ]
    moved = read_jsonl(output.with_name("results.attempts.jsonl"))
    assert [r["line"] for r in moved] == [3], "only the bad row's attempt moved"
    report = cli("report", output.parent)
    assert "partial run" not in report.stdout
    assert "rows      5 (success 4 · failure 1)" in report.stdout


def test_a_bad_rows_line_number_id_taken_by_a_real_row_and_its_alternative_too(
    cli: CLI, tmp_path: Path
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join([_row("line-2"), "[1]", _row(2)]) + "\n")
    output = tmp_path / "out.jsonl"
    assert cli.local(path, *RUN, "--bad-rows", "record", "-o", output).returncode == 1
    records = sorted(read_jsonl(output), key=lambda r: r["line"])
    assert [r["row_id"] for r in records][::2] == ["line-2", "2"]
    assert records[1]["row_id"] == "line-2-2"
    assert records[1]["error_category"] == "validation_error"


def test_a_bad_row_whose_own_id_another_row_has_is_a_duplicate_id(cli: CLI, tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(_row("q1") + "\n" + json.dumps({"id": "q1", "prompt": 5}) + "\n")
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, "--bad-rows", "record", "-o", output)
    assert proc.returncode == 2, proc.stdout
    (line,) = error_lines(proc.stderr)
    assert line == f"error: {path}:2: duplicate id 'q1' (first at line 1); ids must be unique"
    assert not output.exists()


# ------------------------------------------------------------ ids across shards (item 10)


@pytest.mark.parametrize("shard", ["1/2", "2/2"])
def test_every_shard_refuses_a_duplicate_id_anywhere_in_the_file(
    cli: CLI, tmp_path: Path, shard: str
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(_row(i) for i in ["q1", "q7", "q7", "q3"]) + "\n")
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, "--shard", shard, "-o", output)
    assert proc.returncode == 2, proc.stdout
    (line,) = error_lines(proc.stderr)
    assert line == f"error: {path}:3: duplicate id 'q7' (first at line 2); ids must be unique"
    assert not output.exists()


def test_every_shard_refuses_a_numeric_id_equal_to_another_rows_line(
    cli: CLI, tmp_path: Path
) -> None:
    path = tmp_path / "d.jsonl"
    rows = [json.dumps({"prompt": "a"}), _row("x"), _row(1), _row("y")]
    path.write_text("\n".join(rows) + "\n")
    for shard in ("1/2", "2/2"):
        proc = cli.local(path, *RUN, "--shard", shard, "-o", tmp_path / f"{shard[0]}.jsonl")
        assert proc.returncode == 2, (shard, proc.stdout)
        (line,) = error_lines(proc.stderr)
        assert "duplicate id '1'" in line


def test_report_refuses_to_merge_shards_that_share_a_row(cli: CLI, tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(_row(i) for i in ["q1", "q7", "q3", "q4"]) + "\n")
    shards = [tmp_path / f"s{k}" / "results.jsonl" for k in (1, 2)]
    for k, output in enumerate(shards, start=1):
        assert cli.local(path, *RUN, "--shard", f"{k}/2", "-o", output).returncode == 0
    # what shards of a file holding q1 twice recorded before each shard checked the file
    records = read_jsonl(shards[1])
    (other,) = [r for r in records if r["row_id"] == "q4"]
    other["row_id"] = "q1"
    shards[1].write_text("".join(json.dumps(r) + "\n" for r in records))
    proc = cli("report", *(output.parent for output in shards))
    assert proc.returncode == 2, proc.stdout
    (line,) = error_lines(proc.stderr)
    assert line.startswith(f"error: {shards[0]} and {shards[1]} both hold row 'q1'"), line


# ------------------------------------------------------------------- Parquet (13, 16)


def test_a_parquet_file_naming_a_column_twice_is_refused_like_csv(cli: CLI, tmp_path: Path) -> None:
    pa, pq = parquet_modules()
    path = tmp_path / "d.parquet"
    table = pa.Table.from_arrays(
        [pa.array(["a", "b"]), pa.array(["x", "y"]), pa.array(["a", "b"])],
        names=["prompt", "label", "label"],
    )
    pq.write_table(table, path)
    output = tmp_path / "out.jsonl"
    for command in (("local", path, *RUN, "-o", output), ("validate", _spec(tmp_path), path)):
        proc = cli(*command, "--code-dir", REPO) if command[0] == "local" else cli(*command)
        assert proc.returncode == 2, proc.stdout
        assert "Traceback" not in proc.stderr
        assert f"{path}: the schema names column 'label' twice; rename one" in proc.stderr
    assert not output.exists()


def _spec(base: Path) -> Path:
    spec = base / "spec.yaml"
    spec.write_text(
        "workflow: tests.workflows:EchoWorkflow\n"
        "grader: tests.workflows:LabelGrader\n"
        f"code_dir: {json.dumps(str(REPO))}\n"
    )
    return spec


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_parquet_uuid_column_reaches_the_workflow_as_text(
    cli: CLI, tmp_path: Path, isolation: str
) -> None:
    pa, pq = parquet_modules()
    values = [uuid.UUID(int=1), uuid.UUID("12345678-1234-5678-1234-567812345678")]
    path = tmp_path / "d.parquet"
    column = pa.array([v.bytes for v in values], pa.uuid())
    nested = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), column)
    pq.write_table(
        pa.table({"prompt": ["a", "b"], "label": ["a", "b"], "key": column, "keys": nested}),
        path,
    )
    output = tmp_path / "out.jsonl"
    extra = () if isolation == "none" else ("--isolation", "process")
    echo = ("--workflow", "tests.workflows:MetadataEchoWorkflow")
    proc = cli.local(path, *echo, *extra, "-o", output)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = sorted(read_jsonl(output), key=lambda r: r["line"])
    assert [r["status"] for r in records] == ["success", "success"]
    echoed = [json.loads(r["sample"]["messages"][-1]["content"]) for r in records]
    assert [e["key"] for e in echoed] == [str(v) for v in values]
    assert [e["keys"] for e in echoed] == [[str(v)] for v in values]


# ------------------------------------------------------------------ CSV header (item 14)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'"prompt,label\na,a\n', "not valid CSV (unexpected end of data)"),
        (b'prompt,"label"x\na,a\n', "not valid CSV (',' expected after '\"')"),
        (b"prompt,label\ra,a\rb,b\r", "line ends are lone carriage returns"),
    ],
    ids=["unclosed-quote", "text-after-quote", "cr-line-ends"],
)
def test_validate_refuses_a_malformed_csv_header_in_one_line_like_local(
    cli: CLI, tmp_path: Path, data: bytes, says: str
) -> None:
    path = tmp_path / "d.csv"
    path.write_bytes(data)
    proc = cli("validate", _spec(tmp_path), path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    problems = [line for line in proc.stderr.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 1, proc.stderr
    assert problems[0].startswith(f"problem: {path}:1: ") and says in problems[0]
    local = cli.local(path, *RUN, "-o", tmp_path / "out.jsonl")
    assert local.returncode == 2
    (line,) = error_lines(local.stderr)
    assert line.startswith(f"error: {path}:1: ") and says in line


def test_an_extension_column_stored_as_bytes_is_refused_like_a_binary_one(
    cli: CLI, tmp_path: Path
) -> None:
    pa, pq = parquet_modules()
    blob = pa.ExtensionArray.from_storage(
        pa.opaque(pa.binary(), "blob", "vendor"), pa.array([b"\x00\xff", b"x"])
    )
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"prompt": ["a", "b"], "blob": blob}), path)
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, "--isolation", "process", "-o", output)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = error_lines(proc.stderr)
    assert line.startswith(f"error: {path}: column 'blob' is ") and "to strings" in line
    assert not output.exists()


def test_a_csv_header_of_many_columns_is_checked_in_one_pass(cli: CLI, tmp_path: Path) -> None:
    """The duplicate-name check once counted each name in the whole header: 200,000
    columns took hours. The ceiling is generous; the fixed check takes well under a
    second of it."""
    names = ["prompt", *(f"c{i}" for i in range(200_000))]
    path = tmp_path / "wide.csv"
    path.write_text(",".join(names) + "\n" + ",".join(["a"] * len(names)) + "\n")
    proc = cli.subprocess("validate", _spec(tmp_path), path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"ok: dataset {path}: 1 rows" in proc.stdout
    twice = tmp_path / "twice.csv"
    twice.write_text(",".join([*names, "c7"]) + "\n")
    proc = cli.subprocess("validate", _spec(tmp_path), twice, timeout=120)
    assert proc.returncode == 2
    assert f"problem: {twice}:1: header names column 'c7' twice; rename one" in proc.stderr


def test_a_csv_messages_cell_nested_too_deeply_is_a_bad_row(cli: CLI, tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    good = '"[{""role"": ""user"", ""content"": ""hi""}]"'
    path = tmp_path / "d.csv"
    path.write_text(f'id,messages\nq1,"{deep}"\nq2,{good}\n')
    proc = cli("validate", _spec(tmp_path), path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "internal error" not in proc.stderr
    assert f"problem: {path}:row 1: 'messages' in a CSV cell is JSON nested too deeply" in (
        proc.stderr
    )
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, "--bad-rows", "record", "-o", output)
    assert proc.returncode == 1, proc.stderr
    records = {r["line"]: r for r in read_jsonl(output)}
    assert records[1]["error_category"] == "validation_error"
    assert (records[2]["row_id"], records[2]["status"]) == ("q2", "success")


def _claiming_rows(path: Path, claimed: int) -> None:
    """A one-row Parquet file whose footer claims ``claimed`` rows (thrift compact: field
    3, ``num_rows``, an i64 as a zigzag varint right after its header byte 0x16)."""
    pa, pq = parquet_modules()
    pq.write_table(pa.table({"id": ["q1"], "prompt": ["a"]}), path)
    data = path.read_bytes()
    size = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - size : -8]
    varint, value = b"", claimed << 1
    while value >= 0x80:
        varint, value = varint + bytes([value & 0x7F | 0x80]), value >> 7
    varint += bytes([value])
    at = footer.index(b"\x16\x02")  # num_rows = 1
    lied = footer[:at] + b"\x16" + varint + footer[at + 2 :]
    path.write_bytes(data[: -8 - size] + lied + len(lied).to_bytes(4, "little") + b"PAR1")
    assert pq.ParquetFile(path).metadata.num_rows == claimed


def test_a_parquet_footer_claiming_a_trillion_rows_costs_no_memory(
    cli: CLI, tmp_path: Path
) -> None:
    path = tmp_path / "d.parquet"
    _claiming_rows(path, 10**12)
    output = tmp_path / "out.jsonl"
    proc = cli.local(path, *RUN, "-o", output)
    assert "MemoryError" not in proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert [r["row_id"] for r in read_jsonl(output)] == ["q1"]


def test_a_huge_header_name_is_cut_in_the_one_error_line(cli: CLI, tmp_path: Path) -> None:
    name = "n" * 5_000_000  # a header cell of 5 MB that names no column osmo-run reads
    path = tmp_path / "d.csv"
    path.write_text(f"{name},{name}\na,b\n")
    proc = cli.local(path, *RUN, "-o", tmp_path / "out.jsonl")
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert "header names column 'nnn" in line and len(line) < 500
    path.write_text(f"{name},other\na,b\n")
    proc = cli.local(path, *RUN, "-o", tmp_path / "out.jsonl")
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert "it has 'nnn" in line and len(line) < 1000
