"""Code written for osmosis-ai, in a whole ``osmo-run local`` run: a removed sample is
skipped in the output, the summary, JUnit and the gates; ``grade_without_label`` grades
rows that have only metadata."""

from __future__ import annotations

import json
from pathlib import Path

from junitparser import JUnitXml, Skipped

from osmo_run.sdk.types import SAMPLE_REMOVED
from tests.conftest import CLI, WriteJsonl, read_jsonl

COMPAT = (
    "--workflow",
    "tests.compat_workflows:CompatWorkflow",
    "--grader",
    "tests.compat_workflows:CompatGrader",
)
ROWS = [
    {"id": "kept", "prompt": "hi", "label": "hi", "metadata": {"grade": "return:1"}},
    {"id": "removed", "prompt": "hi", "label": "hi", "metadata": {"remove": True}},
    {"id": "dropped-by-grader", "prompt": "hi", "label": "hi", "metadata": {"grade": "remove"}},
]


def test_removed_samples_are_skipped_everywhere_and_fail_nothing(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    out = tmp_path / "run" / "results.jsonl"
    junit = tmp_path / "junit.xml"
    proc = cli.local(write_jsonl(ROWS), *COMPAT, "-o", out, "--junit-xml", junit)
    assert proc.returncode == 0, proc.stderr  # no gate given: only a failure fails the step
    records = {r["row_id"]: r for r in read_jsonl(out)}
    for row_id in ("removed", "dropped-by-grader"):
        record = records[row_id]
        assert (record["status"], record["reward"], record["error_category"]) == (
            "success",
            None,
            None,
        )
        assert record["grader_skipped"] == SAMPLE_REMOVED
        assert record["sample"]["remove_sample"] is True
    summary = json.loads((out.parent / "results.summary.json").read_text())
    assert summary["by_status"] == {"success": 3}
    assert summary["grader_skipped"] == {SAMPLE_REMOVED: 2}
    assert summary["graded"] == 1
    cases = {case.name: case for case in next(iter(JUnitXml.fromfile(str(junit))))}
    assert cases["kept"].is_passed
    for row_id in ("removed", "dropped-by-grader"):
        (skipped,) = cases[row_id].result
        assert isinstance(skipped, Skipped) and skipped.message == SAMPLE_REMOVED


def test_a_removed_sample_counts_as_ungraded_in_quality_gates(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    """Like every row without a reward, it counts 0 in --fail-under and --min-pass-rate:
    a workflow cannot raise its own score by removing its failures."""
    out = tmp_path / "results.jsonl"
    proc = cli.local(write_jsonl(ROWS), *COMPAT, "-o", out, "--min-pass-rate", "0.5")
    assert proc.returncode == 1
    assert "gate failed: --min-pass-rate measured 0.3333, below the minimum 0.5" in proc.stdout


def test_grade_without_label_grades_rows_that_have_only_metadata(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workflow: tests.compat_workflows:CompatWorkflow\n"
        "grader: tests.compat_workflows:CompatGrader\n"
        "grade_without_label: true\n"
    )
    rows = [{"id": "tests-only", "prompt": "hi", "metadata": {"grade": "label", "tests": ["t1"]}}]
    data = write_jsonl(rows)
    graded_out, skipped_out = tmp_path / "graded.jsonl", tmp_path / "skipped.jsonl"
    proc = cli.local(data, "--spec", spec, "-o", graded_out)
    assert proc.returncode == 0, proc.stderr
    (graded,) = read_jsonl(graded_out)
    assert (graded["reward"], graded["grader_skipped"]) == (1.0, None)
    manifest = json.loads(graded_out.with_suffix(".manifest.json").read_text())
    assert manifest["defining"]["grade_without_label"] is True
    spec.write_text(spec.read_text().replace("true", "false"))
    assert cli.local(data, "--spec", spec, "-o", skipped_out).returncode == 0
    (skipped,) = read_jsonl(skipped_out)
    assert (skipped["reward"], skipped["grader_skipped"]) == (None, "row has no label")
