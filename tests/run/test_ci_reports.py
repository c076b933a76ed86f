"""Reports for CI systems (``osmo_run.run.reporting.ci_reports``): JUnit XML read back by an
independent reader (junitparser) and by ElementTree against the attribute names CI tools
use, and the Markdown summary appended to ``$GITHUB_STEP_SUMMARY``.

The same reports written by a real ``osmo-run local`` run are in ``tests/cli/test_ci.py``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped, TestSuite

from osmo_run.run.reporting.ci_reports import (
    append_step_summary,
    junit_xml,
    markdown_summary,
    write_junit,
)
from osmo_run.run.reporting.gates import GateFailure
from osmo_run.run.reporting.summary import RunSummary, SummaryBuilder
from osmo_run.run.writing.records import record_dict
from osmo_run.sdk.types import (
    ErrorCategory,
    ExecutionResult,
    Phase,
    RolloutSample,
    RolloutStatus,
    Timings,
)


def record(
    row_id: str,
    reward: float | None = None,
    category: ErrorCategory | None = None,
    message: str | None = None,
    skipped: str | None = None,
    sample: int = 0,
    seconds: float = 0.5,
    status: RolloutStatus | None = None,
) -> dict[str, Any]:
    """One output record as the runner writes it."""
    failed = category is not None
    result = ExecutionResult(
        rollout_id=row_id if not sample else f"{row_id}~{sample}",
        status=status or (RolloutStatus.FAILURE if failed else RolloutStatus.SUCCESS),
        sample=None if failed else RolloutSample(messages=[], reward=reward),
        error_category=category,
        error_message=message,
        error_phase=Phase.WORKFLOW if failed else None,
        grader_skipped=skipped,
        timings=Timings(total_sec=seconds),
    )
    return record_dict(row_id, 0, 1, result, sample_index=sample)


RECORDS = [
    record("pass", reward=1.0, seconds=1.25),
    record("below", reward=0.5, seconds=0.25),
    record("timeout", category=ErrorCategory.TIMEOUT, message="exceeded its 5s deadline"),
    record("crash", category=ErrorCategory.AGENT_ERROR, message="ZeroDivisionError: x"),
    record("unlabeled", skipped="row has no label"),
    record(
        "stopped",
        category=ErrorCategory.CANCELLED,
        message="the run was interrupted",
        status=RolloutStatus.CANCELLED,
    ),
]


def write_results(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def summary_of(records: list[dict[str, Any]], threshold: float = 1.0) -> RunSummary:
    builder = SummaryBuilder(pass_threshold=threshold)
    for item in records:
        builder.add_record(item)
    return builder.build()


@pytest.fixture
def junit_file(tmp_path: Path) -> Path:
    results = write_results(tmp_path / "results.jsonl", RECORDS)
    target = tmp_path / "reports" / "nested" / "junit.xml"  # parents are created
    write_junit(results, target, "mydata", threshold=1.0)
    return target


# --- JUnit read by junitparser ----------------------------------------------------------


def test_junit_parses_with_an_independent_reader_one_case_per_row(junit_file: Path) -> None:
    xml = JUnitXml.fromfile(str(junit_file))
    suites = list(xml)
    assert len(suites) == 1
    suite = suites[0]
    assert isinstance(suite, TestSuite)
    assert suite.name == "mydata"
    cases = {case.name: case for case in suite}
    assert list(cases) == ["pass", "below", "timeout", "crash", "unlabeled", "stopped"]
    assert {case.classname for case in suite} == {"osmo-run.mydata"}
    assert cases["pass"].is_passed
    assert cases["pass"].result == []
    assert cases["pass"].time == pytest.approx(1.25)


def test_junit_keeps_failures_below_threshold_apart_from_errors(junit_file: Path) -> None:
    cases = {case.name: case for suite in JUnitXml.fromfile(str(junit_file)) for case in suite}

    (below,) = cases["below"].result
    assert isinstance(below, Failure) and not isinstance(below, Error)
    assert below.type == "below_threshold"
    assert below.message == "reward 0.5 below the pass threshold 1"

    (timeout,) = cases["timeout"].result
    assert isinstance(timeout, Error)
    assert timeout.type == "timeout"
    assert timeout.message == "timeout (workflow)"
    assert timeout.text == "exceeded its 5s deadline"

    (crash,) = cases["crash"].result
    assert isinstance(crash, Error)
    assert (crash.type, crash.text) == ("agent_error", "ZeroDivisionError: x")

    (stopped,) = cases["stopped"].result
    assert isinstance(stopped, Error)
    assert stopped.type == "cancelled"

    (unlabeled,) = cases["unlabeled"].result
    assert isinstance(unlabeled, Skipped)
    assert unlabeled.message == "row has no label"
    assert cases["unlabeled"].is_skipped


def test_junit_totals_agree_with_the_cases(junit_file: Path) -> None:
    xml = JUnitXml.fromfile(str(junit_file))
    (suite,) = list(xml)
    for element in (xml, suite):
        assert (element.tests, element.failures, element.errors, element.skipped) == (6, 1, 3, 1)
        assert element.time == pytest.approx(1.25 + 0.25 + 4 * 0.5)
    results = [type(r) for case in suite for r in case.result]
    assert results.count(Failure) == suite.failures
    assert results.count(Error) == suite.errors
    assert results.count(Skipped) == suite.skipped


# --- JUnit read with ElementTree, attribute names as CI tools read them --------------------


def test_junit_has_the_elements_and_attributes_ci_tools_read(junit_file: Path) -> None:
    text = junit_file.read_text(encoding="utf-8")
    assert text.startswith("<?xml version='1.0' encoding='utf-8'?>")
    root = ET.parse(junit_file).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 6
    for element in (root, suite):
        assert {k: element.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
            "tests": "6",
            "failures": "1",
            "errors": "3",
            "skipped": "1",
        }
        assert float(element.get("time", "x")) == pytest.approx(3.5)
    for case in cases:
        assert case.get("name") and case.get("classname") == "osmo-run.mydata"
        float(case.get("time", "x"))
        assert len(case) <= 1
    assert len(suite.findall("testcase/failure")) == int(suite.get("failures", "-1"))
    assert len(suite.findall("testcase/error")) == int(suite.get("errors", "-1"))
    assert len(suite.findall("testcase/skipped")) == int(suite.get("skipped", "-1"))
    for tag in ("failure", "error"):
        for element in suite.iter(tag):
            assert element.get("type") and element.get("message")
    assert all(element.get("message") for element in suite.iter("skipped"))


def test_junit_threshold_decides_what_is_a_failure() -> None:
    records = [record("a", reward=0.5), record("b", reward=0.49), record("c", reward=0.0)]
    root = junit_xml(records, "s", threshold=0.5).getroot()
    failed = [
        case.get("name") for case in root.iter("testcase") if case.find("failure") is not None
    ]
    assert failed == ["b", "c"]
    assert root.get("failures") == "2"


def test_junit_has_a_case_per_sample() -> None:
    records = [record("r", reward=1.0, sample=k) for k in range(3)]
    records.append(record("r", category=ErrorCategory.TIMEOUT, message="late", sample=3))
    root = junit_xml(records, "s", threshold=1.0).getroot()
    names = [case.get("name") for case in root.iter("testcase")]
    assert len(names) == len(set(names)) == 4
    assert names[1:] == ["r (sample 1)", "r (sample 2)", "r (sample 3)"]
    assert (root.get("tests"), root.get("errors")) == ("4", "1")


def test_junit_of_an_empty_results_file_is_valid(tmp_path: Path) -> None:
    results = write_results(tmp_path / "results.jsonl", [])
    write_junit(results, tmp_path / "j.xml", "empty", threshold=1.0)
    xml = JUnitXml.fromfile(str(tmp_path / "j.xml"))
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (0, 0, 0, 0)


def test_junit_stays_valid_xml_with_control_characters_in_messages_and_ids(
    tmp_path: Path,
) -> None:
    """Exception messages carry ANSI colour codes and worse; XML 1.0 forbids them."""
    noisy = "\x1b[31mboom\x1b[0m \x00\x07 lone \ud800 ok"
    records = [
        record("row\x07bell", category=ErrorCategory.AGENT_ERROR, message=noisy),
        record("fine", reward=1.0),
    ]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    target = tmp_path / "j.xml"
    write_junit(results, target, "s", threshold=1.0)
    xml = JUnitXml.fromfile(str(target))
    cases = [case for suite in xml for case in suite]
    assert len(cases) == 2
    (error,) = cases[0].result
    assert isinstance(error, Error)
    assert "boom" in (error.text or "") and "ok" in (error.text or "")
    assert "bell" in cases[0].name
    ET.parse(target)  # and the stdlib parser agrees


# --- Markdown ---------------------------------------------------------------------------


def test_markdown_has_verdict_counts_histogram_and_failed_rows(tmp_path: Path) -> None:
    results = write_results(tmp_path / "results.jsonl", RECORDS)
    failure = GateFailure("--max-errors", 3, 1, "budget")
    text = markdown_summary(results, summary_of(RECORDS), [failure], "osmo-run local x")
    lines = text.splitlines()
    assert lines[0] == "## osmo-run: osmo-run local x — ❌ failed"
    assert "- gate failed: --max-errors measured 3, above the maximum 1" in lines
    header = lines.index(next(line for line in lines if line.startswith("| rollouts |")))
    assert lines[header + 2] == "| 6 | 3 | 2 | 1 | 2 | 0.25 | 0.75 | 0.1667 |"
    assert "| error category | rollouts |" in lines
    for category in ("timeout", "agent_error", "cancelled"):
        assert f"| {category} | 1 |" in lines
    assert "| row | category | phase | message |" in lines
    assert "| timeout | timeout | workflow | exceeded its 5s deadline |" in lines
    assert "| crash | agent_error | workflow | ZeroDivisionError: x |" in lines
    assert not any(line.startswith(("| pass |", "| below |")) for line in lines)
    assert lines[-1] == f"Results: `{results}`"


def test_markdown_of_a_passing_run(tmp_path: Path) -> None:
    records = [record("a", reward=1.0), record("b", reward=1.0)]
    results = write_results(tmp_path / "results.jsonl", records)
    text = markdown_summary(results, summary_of(records), [], "t")
    assert text.startswith("## osmo-run: t — ✅ passed\n")
    assert "gate failed" not in text
    assert "| error category |" not in text
    assert "| row | category |" not in text


def test_markdown_cells_escape_pipes_and_newlines_and_cap_rows(tmp_path: Path) -> None:
    records = [
        record(f"r{i}", category=ErrorCategory.AGENT_ERROR, message="a | b\nsecond line")
        for i in range(55)
    ]
    results = write_results(tmp_path / "results.jsonl", records)
    text = markdown_summary(results, summary_of(records), [], "t")
    rows = [line for line in text.splitlines() if line.startswith("| r") and "agent" in line]
    assert len(rows) == 50
    assert rows[0] == "| r0 | agent_error | workflow | a \\| b\\\\nsecond line |"  # one line
    assert "…and 5 more failed rows." in text


def test_step_summary_is_appended_when_the_variable_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "step_summary.md"
    target.write_text("# an earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    assert append_step_summary("## first\n") == target
    assert append_step_summary("## second\n") == target
    assert target.read_text(encoding="utf-8") == "# an earlier step\n## first\n## second\n"


def test_step_summary_is_not_written_without_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert append_step_summary("## x\n") is None
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "")
    assert append_step_summary("## x\n") is None
