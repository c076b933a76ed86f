"""Any string JSON can hold (a lone surrogate, a control character, NUL) in a row reaches
every writer intact: the printed FAILURE line, ``--json``, the results file, the Markdown
summary and ``$GITHUB_STEP_SUMMARY``, the JUnit report; the run ends with its own exit
code, never ``internal error``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import CLI, REPO, cli_env, read_jsonl

QUOTING = ("--workflow", "tests.cli.hostile_workflows:QuotingWorkflow", "--code-dir", REPO)


def test_a_lone_surrogate_in_an_error_reaches_every_report(cli: CLI, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    # written as JSON escapes: the file is valid UTF-8, the string holds a lone surrogate
    data.write_text(
        '{"id": "r1", "prompt": "broken emoji \\ud83d here", "detail": "\\udc00\\u0000"}\n'
    )
    run = tmp_path / "run"
    step = tmp_path / "step.md"
    proc = cli.subprocess(
        "local", data, *QUOTING, "-o", run / "results.jsonl", "--plain", "--json",
        "--summary-md", run / "summary.md", "--junit-xml", run / "junit.xml",
        env=cli_env(GITHUB_STEP_SUMMARY=str(step)),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "internal error" not in proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["exit_code"] == 1
    failure = [line for line in proc.stderr.splitlines() if "FAILURE" in line]
    assert failure and "broken emoji \\ud83d here" in failure[0], proc.stderr
    (row,) = read_jsonl(run / "results.jsonl")
    assert row["error_message"].startswith("ValueError: cannot answer broken emoji \ud83d here")
    for markdown in (run / "summary.md", step):
        assert "broken emoji \\\\ud83d here" in markdown.read_text(encoding="utf-8")
    case = ET.parse(run / "junit.xml").getroot().find(".//error")
    assert case is not None and "broken emoji \\ud83d here" in str(case.text)
