"""A results file edited by hand (a field of the wrong kind, a non-finite reward, an unknown
status): every reader of it (report, report A B, --resume, regrade) names the line in one
line and never fails with an internal error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CLI, error_lines

ECHO = ("--workflow", "tests.workflows:EchoWorkflow", "--grader", "osmo_run.graders:Includes")


def _edited_run(cli: CLI, write_jsonl, field: str, value: object) -> Path:
    rows = [{"id": f"r{i}", "prompt": f"hi {i}", "label": f"hi {i}"} for i in range(3)]
    data = write_jsonl(rows)
    result = cli.local(data, *ECHO, "--output", "run/results.jsonl", "--display", "none")
    assert result.returncode == 0, result.stderr
    results = cli.cwd / "run" / "results.jsonl"
    lines = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    lines[1][field] = value
    results.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return data


EDITS = [
    ("reward", "high", "reward: Input should be a valid number"),
    ("reward", float("nan"), "reward: nan is not a finite number"),
    ("status", "weird", "status: Input should be 'success', 'failure' or 'cancelled'"),
    ("row_index", "1", "row_index: Input should be a valid integer"),
    ("timings", [], "timings: Input should be a valid dictionary or instance of TimingsRecord"),
]


@pytest.mark.parametrize(("field", "value", "why"), EDITS)
def test_report_names_the_line_and_counts_the_run_partial(
    cli: CLI, write_jsonl, field: str, value: object, why: str
) -> None:
    _edited_run(cli, write_jsonl, field, value)
    for args in (("run/results.jsonl",), ("run/results.jsonl", "run/results.jsonl")):
        result = cli("report", *args)
        assert "internal error" not in result.stderr and "Traceback" not in result.stderr
        text = " ".join((result.stdout + result.stderr).split())
        assert f"2 (not a result record: {why})" in text
    single = cli("report", "run/results.jsonl")
    assert single.returncode == 1  # a rollout of the run is missing from what can be read
    assert "partial run: 2 of 3 rollouts recorded" in " ".join(single.stdout.split())


@pytest.mark.parametrize(("field", "value", "why"), EDITS)
def test_resume_and_regrade_refuse_the_line_in_one_line(
    cli: CLI, write_jsonl, field: str, value: object, why: str
) -> None:
    data = _edited_run(cli, write_jsonl, field, value)
    before = (cli.cwd / "run" / "results.jsonl").read_bytes()
    resume = cli.local(data, *ECHO, "--output", "run/results.jsonl", "--resume")
    assert resume.returncode == 2
    assert error_lines(resume.stderr) == [
        f"error: run/results.jsonl:2: not a result record ({why}); remove the line (its "
        "rollout then runs again) or pass --overwrite to start over"
    ]
    regrade = cli("regrade", "run/results.jsonl", "--code-dir", cli.cwd)
    assert regrade.returncode == 2
    assert error_lines(regrade.stderr) == [
        f"error: run/results.jsonl:2: not a result record: {why}; mend or remove the line "
        "before regrading"
    ]
    assert (cli.cwd / "run" / "results.jsonl").read_bytes() == before
