"""The bundled example (configs/example.yaml, datasets/example.jsonl) through the CLI."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from osmo_run.run.writing.records import OutputRecord
from tests.conftest import CLI, REPO, read_jsonl


def test_bundled_example_fails_some_rows_on_purpose(cli: CLI, tmp_path: Path) -> None:
    """Run from elsewhere: the spec's code_dir is relative to the spec, not the cwd."""
    output = tmp_path / "example.jsonl"
    proc = cli(
        "local",
        REPO / "datasets" / "example.jsonl",
        "--spec",
        REPO / "configs" / "example.yaml",
        "--display",
        "plain",
        "-o",
        output,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = read_jsonl(output)
    assert len(lines) == 35
    for line in lines:
        OutputRecord.model_validate(line)
    assert len({line["row_id"] for line in lines}) == 35
    summary = json.loads((tmp_path / "example.summary.json").read_text())
    assert summary["error_categories"] == {"validation_error": 3, "agent_error": 2, "timeout": 2}
    assert summary["grader_skipped"] == {"row has no label": 2}
    assert summary["total"] == 35
    skipped = sorted(line["row_id"] for line in lines if line["grader_skipped"])
    assert skipped == ["unlabeled-1", "unlabeled-2"]
    assert Counter(line["status"] for line in lines) == {"success": 28, "failure": 7}
    by_id = {line["row_id"]: line for line in lines}
    assert by_id["calc-01"]["reward"] == 1.0
    # the built-in grader says why a row got 0: calc-16's label is wrong on purpose
    assert by_id["calc-16"]["reward"] == 0.0
    assert by_id["calc-16"]["info"]["grader"]["explanation"].startswith(
        "last number of the answer, 151, does not match label 152"
    )
    assert by_id["bad-label-1"]["error_phase"] == "grader"
    assert by_id["slow-1"]["error_category"] == "timeout"
