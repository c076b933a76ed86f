"""Issue #15's "done when": datasets/tricky/ (slash and dot-dot ids, a 300-character id, a
metadata-only row, a NUL, CRLF line ends, a 1 MB prompt) runs every row through
``osmo-run local`` with every id preserved, the same as JSONL, CSV and Parquet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from junitparser import JUnitXml

from osmo_run.sdk.names import safe_name
from tests.conftest import CLI, REPO, read_jsonl

TRICKY = REPO / "datasets" / "tricky"
IDS: list[str] = json.loads((TRICKY / "ids.json").read_text())
XML_SAFE = [i for i in IDS if "\x00" not in i]
RUN = ("--workflow", "tests.workflows:EchoWorkflow", "--grader", "tests.workflows:ScriptedGrader")


def _outcomes(output: Path) -> list[tuple[str, int, str, float, int, list[str]]]:
    return sorted(
        (
            r["row_id"],
            r["row_index"],
            r["status"],
            r["reward"],
            r["info"]["prompt_chars"],
            r["info"]["metadata"],
        )
        for r in read_jsonl(output)
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("tricky")
    cli = CLI(base)
    outputs = {}
    for fmt in ("jsonl", "csv", "parquet"):
        output = base / fmt / "results.jsonl"
        junit = base / fmt / "junit.xml"
        proc = cli.local(TRICKY / f"tricky.{fmt}", *RUN, "-o", output, "--junit-xml", junit)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outputs[fmt] = output
    return outputs


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_every_tricky_row_runs_with_its_id_preserved(runs: dict[str, Path], fmt: str) -> None:
    records = read_jsonl(runs[fmt])
    assert sorted(r["row_id"] for r in records) == sorted(IDS)
    assert all(r["status"] == "success" and r["reward"] == 1.0 for r in records), [
        (r["row_id"][:40], r["error_message"], r["reward"]) for r in records
    ]
    by_id = {r["row_id"]: r for r in records}
    assert by_id["big"]["info"]["prompt_chars"] == (1 << 20) + len(" needle")
    assert by_id["meta-only"]["info"]["prompt_messages"] == 0
    assert by_id["meta-only"]["info"]["metadata"] == ["question"]
    assert by_id["nul\x00id"]["sample"]["messages"][0]["content"] == "before\x00after"
    assert all(r["safe_name"] == safe_name(r["row_id"]) for r in records)
    cases = [c.name for s in JUnitXml.fromfile(str(runs[fmt].parent / "junit.xml")) for c in s]
    assert set(XML_SAFE) <= set(cases)  # a NUL, which XML cannot hold, is written \x00
    assert "nul\\x00id" in cases


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_each_tricky_rows_artifacts_are_a_direct_child_named_by_its_safe_name(
    tmp_path: Path, fmt: str
) -> None:
    # ids are data: "../../etc/passwd", "a/b", 300 characters and a NUL name no directory
    output = tmp_path / "results.jsonl"
    artifacts_run = ("--workflow", "tests.workflows:ArtifactWorkflow")
    grader = ("--grader", "tests.workflows:ArtifactGrader")
    proc = CLI(tmp_path).local(TRICKY / f"tricky.{fmt}", *artifacts_run, *grader, "-o", output)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = read_jsonl(output)
    assert sorted(r["row_id"] for r in records) == sorted(IDS)
    assert all(r["reward"] == 1.0 for r in records)  # the grader read the note back
    artifacts = tmp_path / "artifacts"
    folders = sorted(p.relative_to(artifacts).as_posix() for p in artifacts.iterdir())
    assert folders == sorted(safe_name(row_id) for row_id in IDS)
    for record in records:
        note = artifacts / safe_name(record["row_id"]) / "note.txt"
        assert note.read_text() == f"note of {record['rollout_id']}"
    assert not (artifacts / ".." / ".." / "etc").exists()  # where "../../etc/passwd" points


def test_the_three_formats_run_the_same(runs: dict[str, Path]) -> None:
    jsonl = _outcomes(runs["jsonl"])
    assert len(jsonl) == len(IDS)
    assert _outcomes(runs["csv"]) == jsonl
    assert _outcomes(runs["parquet"]) == jsonl


def test_the_jsonl_file_has_crlf_line_ends_and_a_nul_escape() -> None:
    raw = (TRICKY / "tricky.jsonl").read_bytes()
    assert raw.count(b"\r\n") == len(IDS) == raw.count(b"\n")
    assert b"\\u0000" in raw
    assert any(len(i) == 300 for i in IDS) and "../../etc/passwd" in IDS
