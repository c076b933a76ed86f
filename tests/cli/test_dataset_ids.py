"""Ids are data: ``osmo-run local`` keeps every id exactly and names directories by safe names."""

from __future__ import annotations

from pathlib import Path

from junitparser import JUnitXml

from osmo_run.sdk.names import safe_name
from tests.conftest import CLI, WriteJsonl, error_lines, read_jsonl

ARTIFACTS = ("--workflow", "tests.workflows:ArtifactWorkflow")
ARTIFACTS += ("--grader", "tests.workflows:ArtifactGrader")

IDS = ["gsm8k/train/17", "org/repo#123", "a/b\\c d", "../../x", "..", "y" * 300, "Q1", "plain-1"]


def test_odd_ids_run_and_are_kept_in_results_artifacts_and_junit(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl([{"id": row_id, "prompt": "hi", "label": "x"} for row_id in IDS])
    output = tmp_path / "run" / "results.jsonl"
    junit = tmp_path / "junit.xml"
    proc = cli.local(data, *ARTIFACTS, "-o", output, "--junit-xml", junit)
    assert proc.returncode == 0, proc.stderr
    records = read_jsonl(output)
    assert sorted(r["row_id"] for r in records) == sorted(IDS)
    assert all(r["reward"] == 1.0 for r in records)  # the grader found the workflow's note
    artifacts = output.parent / "artifacts"
    for record in records:
        assert record["safe_name"] == safe_name(record["row_id"])
        note = artifacts / record["safe_name"] / "note.txt"
        assert note.read_text() == f"note of {record['row_id']}"
    names = {p.name for p in artifacts.iterdir()}
    assert names == {safe_name(i) for i in IDS}  # nothing outside artifacts/, nothing else
    assert "plain-1" in names  # a safe id names its own directory
    assert not (tmp_path / "x").exists() and not (output.parent / "x").exists()
    cases = [case.name for suite in JUnitXml.fromfile(str(junit)) for case in suite]
    assert sorted(cases) == sorted(IDS)


def test_samples_of_an_odd_id_get_a_directory_each(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl([{"id": "a/b", "prompt": "hi", "label": "x"}])
    output = tmp_path / "run" / "results.jsonl"
    proc = cli.local(data, *ARTIFACTS, "-o", output, "--samples", "2")
    assert proc.returncode == 0, proc.stderr
    records = read_jsonl(output)
    assert sorted(r["rollout_id"] for r in records) == ["a/b~0", "a/b~1"]
    expected = {f"{safe_name('a/b')}~0", f"{safe_name('a/b')}~1"}
    assert {r["safe_name"] for r in records} == expected
    assert {p.name for p in (output.parent / "artifacts").iterdir()} == expected


def test_two_ids_of_one_safe_name_stop_the_run_naming_both(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    clash = safe_name("a/b")
    data = write_jsonl([{"id": "a/b", "prompt": "hi"}, {"id": clash, "prompt": "hi"}])
    output = tmp_path / "run" / "results.jsonl"
    proc = cli.local(data, *ARTIFACTS, "-o", output)
    assert proc.returncode == 2
    first = error_lines(proc.stderr)[0]
    assert first == (
        f"error: {data}:2: id {clash!r} and id 'a/b' (line 1) have the same file name "
        f"{clash!r}; rename one of them"
    )
    assert not output.exists()


def test_a_metadata_only_row_runs_with_an_empty_prompt(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl(
        [
            {"id": "m", "metadata": {"question": "17*3"}, "label": "17*3"},
            {"id": "p", "prompt": "2+2", "label": "2+2"},
        ]
    )
    output = tmp_path / "out.jsonl"
    workflow = ("--workflow", "tests.workflows:EchoWorkflow")
    proc = cli.local(data, *workflow, "--grader", "tests.workflows:ScriptedGrader", "-o", output)
    assert proc.returncode == 0, proc.stderr
    by_id = {r["row_id"]: r for r in read_jsonl(output)}
    assert by_id["m"]["info"]["prompt_messages"] == 0
    assert by_id["m"]["info"]["metadata"] == ["question"]
    assert by_id["m"]["reward"] == 1.0
    assert by_id["p"]["info"]["prompt_messages"] == 1


def test_a_row_with_neither_prompt_nor_metadata_stops_the_run_naming_its_line(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl([{"prompt": "fine"}, {"label": "4"}])
    output = tmp_path / "out.jsonl"
    proc = cli.local(data, "--workflow", "tests.workflows:EchoWorkflow", "-o", output)
    assert proc.returncode == 2
    first = error_lines(proc.stderr)[0]
    assert first.startswith(f"error: {data}:2: row has no prompt and no metadata: give")
    assert not output.exists()


def test_csv_and_parquet_datasets_run_like_jsonl(cli: CLI, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    csv_path = tmp_path / "data.csv"
    csv_path.write_text('id,prompt,label\na/1,"hi, there",hi\nb,"two\nlines",lines\n')
    rows = [{"id": "a/1", "prompt": "hi, there", "label": "hi"}]
    rows.append({"id": "b", "prompt": "two\nlines", "label": "lines"})
    parquet_path = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet_path)
    scripted = ("--workflow", "tests.workflows:EchoWorkflow")
    scripted += ("--grader", "tests.workflows:ScriptedGrader")
    results = {}
    for path in (csv_path, parquet_path):
        output = tmp_path / path.suffix[1:] / "results.jsonl"
        proc = cli.local(path, *scripted, "-o", output)
        assert proc.returncode == 0, proc.stderr
        results[path.suffix] = sorted(
            (r["row_id"], r["line"], r["reward"]) for r in read_jsonl(output)
        )
    assert results[".csv"] == results[".parquet"] == [("a/1", 1, 1.0), ("b", 2, 1.0)]


def test_dataset_format_flag_overrides_the_extension(cli: CLI, tmp_path: Path) -> None:
    data = tmp_path / "export.txt"
    data.write_text("id,prompt\nq,hi\n")
    output = tmp_path / "out.jsonl"
    proc = cli.local(data, "--workflow", "tests.workflows:EchoWorkflow", "-o", output)
    assert proc.returncode == 2  # read as JSONL by default
    assert error_lines(proc.stderr)[0].startswith(f"error: {data}:1: not valid JSON")
    workflow = ("--workflow", "tests.workflows:EchoWorkflow")
    proc = cli.local(data, *workflow, "--dataset-format", "csv", "-o", output)
    assert proc.returncode == 0, proc.stderr
    assert [r["row_id"] for r in read_jsonl(output)] == ["q"]


def test_a_file_that_is_not_parquet_stops_the_run_in_one_line(cli: CLI, tmp_path: Path) -> None:
    data = tmp_path / "data.parquet"
    data.write_text("id,prompt\nq,hi\n")
    proc = cli.local(data, "--workflow", "tests.workflows:EchoWorkflow", "-o", tmp_path / "o.jsonl")
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert line.startswith(f"error: {data}: not a Parquet file (")
    assert not (tmp_path / "o.jsonl").exists()


def _spec(tmp_path: Path, dataset: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workflow: tests.workflows:EchoWorkflow\n"
        "grader: tests.workflows:ScriptedGrader\n"
        f"dataset: {dataset}\n"
    )
    return spec


def test_a_spec_maps_the_columns_of_a_dataset_written_for_another_tool(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl(
        [
            {"uid": "q/1", "question": "hi", "answer": "hi", "source": "a", "difficulty": 1},
            {"uid": "q/2", "question": "yo", "answer": "no", "source": "b", "difficulty": 2},
        ]
    )
    mapping = "{id: uid, prompt: question, label: answer, metadata: [source, difficulty]}"
    output = tmp_path / "out.jsonl"
    proc = cli.local(data, "-s", _spec(tmp_path, mapping), "-o", output)
    assert proc.returncode == 0, proc.stderr  # a wrong answer is a reward of 0, no failure
    records = {r["row_id"]: r for r in read_jsonl(output)}
    assert (records["q/1"]["reward"], records["q/2"]["reward"]) == (1.0, 0.0)
    assert records["q/1"]["info"]["metadata"] == ["difficulty", "source"]
    manifest = (tmp_path / "out.manifest.json").read_text()
    assert '"dataset_columns"' in manifest and '"uid"' in manifest


def test_a_mapping_naming_a_missing_column_stops_the_run_listing_the_columns(
    cli: CLI, tmp_path: Path
) -> None:
    data = tmp_path / "data.csv"
    data.write_text("uid,question,answer\n1,hi,hi\n")
    output = tmp_path / "out.jsonl"
    proc = cli.local(
        data, "-s", _spec(tmp_path, "{prompt: question, label: solution}"), "-o", output
    )
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: {data}: the spec's dataset.label names column 'solution', which the file "
        "does not have; its columns are 'uid', 'question', 'answer'"
    ]
    assert not output.exists()


def test_the_verl_preset_runs_a_verl_parquet_file(cli: CLI, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "data_source": "gsm8k",
            "prompt": [{"role": "user", "content": f"{i}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": f"{i}"},
            "extra_info": {"index": i},
        }
        for i in range(3)
    ]
    data = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    output = tmp_path / "out.jsonl"
    proc = cli.local(data, "-s", _spec(tmp_path, "{preset: verl}"), "-o", output)
    assert proc.returncode == 0, proc.stderr
    records = read_jsonl(output)
    assert [r["reward"] for r in records] == [1.0, 1.0, 1.0]
    assert records[0]["info"]["metadata"] == [
        "ability",
        "data_source",
        "extra_info",
        "reward_model",
    ]


def test_an_unknown_dataset_field_in_the_spec_is_named(cli: CLI, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    proc = cli.local(data, "-s", _spec(tmp_path, "{promt: question}"), "-o", tmp_path / "o.jsonl")
    assert proc.returncode == 2
    assert "field 'dataset.promt': unknown field; did you mean 'prompt'?" in proc.stderr


def test_process_isolation_names_artifacts_by_safe_names_too(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    ids = ["../../x", "a/b"]
    data = write_jsonl([{"id": row_id, "prompt": "hi", "label": "x"} for row_id in ids])
    output = tmp_path / "run" / "results.jsonl"
    proc = cli.local(data, *ARTIFACTS, "--isolation", "process", "--samples", "2", "-o", output)
    assert proc.returncode == 0, proc.stderr
    records = read_jsonl(output)
    assert all(r["reward"] == 1.0 for r in records)  # the grader's child found the note
    names = {p.name for p in (output.parent / "artifacts").iterdir()}
    assert names == {f"{safe_name(i)}~{k}" for i in ids for k in (0, 1)}
