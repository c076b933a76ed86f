"""``osmo-run`` as a CI step, end to end through the real console script: exit codes,
gates, JUnit, step summaries, ``--json``, plain output, ``--smoke`` and fail-fast.

Exit code 130 (Ctrl-C, SIGTERM) end to end is ``tests/cli/test_interrupt.py``; the gate
arithmetic at and around each threshold is ``tests/run/test_gates.py``.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped
from typer.testing import CliRunner

from osmo_run.errors import ExitCode
from osmo_run.run.executing.settings import RunSettings
from tests.conftest import (
    CLI,
    OSMO_RUN,
    REPO,
    SCRIPTED,
    Row,
    WriteJsonl,
    cli_env,
    error_lines,
    jsonl_bytes,
    read_jsonl,
    run_on_a_terminal,
)

REWARDED = (*SCRIPTED, "--grader", "tests.workflows:MetadataGrader")

# Mean reward over all rows 0.375 (the timeout counts 0), pass rate 1/4 (threshold 1.0),
# one error (timeout) of four: error rate 0.25.
GATED: list[Row] = [
    {"id": "full", "prompt": "hi", "label": "x", "metadata": {"reward": 1.0}},
    {"id": "half", "prompt": "hi", "label": "x", "metadata": {"reward": 0.5}},
    {"id": "zero", "prompt": "hi", "label": "x", "metadata": {"reward": 0.0}},
    {"id": "late", "prompt": "hi", "label": "x", "metadata": {"raise": "TimeoutError"}},
]
FAIL_UNDER = "gate failed: --fail-under (mean reward, failures as 0) measured"


def _gated(
    cli: CLI,
    write_jsonl: WriteJsonl,
    tmp_path: Path,
    *args: str,
    rows: list[Row] = GATED,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``osmo-run local`` over ``rows`` (default :data:`GATED`) with rewards from metadata."""
    data = write_jsonl(rows)
    return cli.local(data, *REWARDED, "-o", tmp_path / "out" / "results.jsonl", *args, env=env)


# --- exit codes and gates ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "lines"),
    [
        # no gate: any failed rollout fails the step
        ((), ExitCode.ROLLOUTS_FAILED, []),
        # --fail-under: equal passes, just above fails; the failed rollout is within gates
        (("--fail-under", "0.375"), ExitCode.OK, []),
        (
            ("--fail-under", "0.38"),
            ExitCode.ROLLOUTS_FAILED,
            [f"{FAIL_UNDER} 0.375, below the minimum 0.38"],
        ),
        # --min-pass-rate
        (("--min-pass-rate", "0.25"), ExitCode.OK, []),
        (
            ("--min-pass-rate", "0.26"),
            ExitCode.ROLLOUTS_FAILED,
            ["gate failed: --min-pass-rate measured 0.25, below the minimum 0.26"],
        ),
        # --max-errors: N failures pass, N+1 fail
        (("--max-errors", "1"), ExitCode.OK, []),
        (
            ("--max-errors", "0"),
            ExitCode.ERROR_BUDGET_EXCEEDED,
            ["gate failed: --max-errors measured 1, above the maximum 0"],
        ),
        (("--max-errors", "timeout=1"), ExitCode.OK, []),
        (("--max-errors", "agent_error=0"), ExitCode.OK, []),
        (
            ("--max-errors", "timeout=0"),
            ExitCode.ERROR_BUDGET_EXCEEDED,
            ["gate failed: --max-errors (timeout) measured 1, above the maximum 0"],
        ),
        # --max-error-rate: equal passes, above fails
        (("--max-error-rate", "0.25"), ExitCode.OK, []),
        (
            ("--max-error-rate", "0.24"),
            ExitCode.ERROR_BUDGET_EXCEEDED,
            ["gate failed: --max-error-rate measured 0.25, above the maximum 0.24"],
        ),
        (("--max-error-rate", "timeout=0.25"), ExitCode.OK, []),
        (
            ("--max-error-rate", "timeout=0.2"),
            ExitCode.ERROR_BUDGET_EXCEEDED,
            ["gate failed: --max-error-rate (timeout) measured 0.25, above the maximum 0.2"],
        ),
        # both kinds fail: the budget's code
        (
            ("--fail-under", "0.9", "--max-errors", "0"),
            ExitCode.ERROR_BUDGET_EXCEEDED,
            [
                "gate failed: --max-errors measured 1, above the maximum 0",
                f"{FAIL_UNDER} 0.375, below the minimum 0.9",
            ],
        ),
    ],
)
def test_gates_decide_the_exit_code_and_print_one_line_each(
    cli: CLI,
    write_jsonl: WriteJsonl,
    tmp_path: Path,
    args: tuple[str, ...],
    code: ExitCode,
    lines: list[str],
) -> None:
    # A narrow log (rich wraps at 80 columns without a terminal): gate lines stay whole.
    proc = _gated(cli, write_jsonl, tmp_path, *args, env=cli_env(COLUMNS="60"))
    assert proc.returncode == code, proc.stdout + proc.stderr
    shown = [line for line in proc.stdout.splitlines() if line.startswith("gate failed:")]
    assert shown == lines
    assert "Traceback" not in proc.stderr
    summary = json.loads((tmp_path / "out" / "results.summary.json").read_text())
    assert summary["total"] == 4  # gates never stop a run early


def test_all_rollouts_succeeding_exits_0_whatever_their_rewards(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    proc = _gated(cli, write_jsonl, tmp_path, rows=GATED[:3])
    assert proc.returncode == ExitCode.OK, proc.stderr
    assert "gate failed" not in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--spec", "bad-spec.yaml"), "field 'concurancy': unknown field"),
        (("--max-errors", "many"), "--max-errors: 'many' is not a number"),
        (("--max-errors", "nan"), "--max-errors: 'nan' must be a whole number"),
        (("--max-errors", "1.5"), "--max-errors: '1.5' must be a whole number"),
        (("--max-error-rate", "2"), "--max-error-rate: '2' must be a fraction from 0 to 1"),
        (("--max-errors", "timeouts=1"), "--max-errors: 'timeouts' is not an error category"),
        (("--max-error-rate", "bogus=0.1"), "--max-error-rate: 'bogus' is not an error categ"),
        (("--fail-under", "high"), "Invalid value for '--fail-under'"),
        # a gate that can never fail, or never pass, is refused with its range
        (("--fail-under", "nan"), "--fail-under: nan must be a finite mean reward"),
        (("--fail-under", "inf"), "--fail-under: inf must be a finite mean reward"),
        (("--min-pass-rate", "nan"), "--min-pass-rate: nan must be a fraction from 0 to 1"),
        (("--min-pass-rate", "2"), "--min-pass-rate: 2 must be a fraction from 0 to 1"),
        (("--min-pass-rate", "-0.5"), "--min-pass-rate: -0.5 must be a fraction from 0 to 1"),
        (("--spec", "nan-spec.yaml"), "field 'pass_threshold': Input should be a finite number"),
        (("--agent-timeout", "inf"), "field 'timeouts.agent_sec': Input should be a finite numb"),
        (("--agent-timeout", "nan"), "field 'timeouts.agent_sec': Input should be a finite numb"),
    ],
)
def test_invalid_input_exits_2_before_anything_runs(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    (tmp_path / "bad-spec.yaml").write_text(
        "workflow: tests.workflows:ScriptedWorkflow\nconcurancy: 2\n", encoding="utf-8"
    )
    (tmp_path / "nan-spec.yaml").write_text(
        "workflow: tests.workflows:ScriptedWorkflow\npass_threshold: .nan\n", encoding="utf-8"
    )
    proc = _gated(cli, write_jsonl, tmp_path, "--json", *args)
    assert proc.returncode == ExitCode.INVALID_INPUT, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    # --json: nothing ran, and stdout still holds one JSON object saying why
    assert proc.stdout.count("\n") == 1, proc.stdout
    verdict = json.loads(proc.stdout)
    assert (verdict["exit_code"], verdict["passed"], verdict["summary"]) == (2, False, None)
    assert message in verdict["error"] or message.startswith("Invalid value"), verdict
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_a_bad_dataset_exits_2(cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path) -> None:
    proc = _gated(cli, write_jsonl, tmp_path, "--fail-under", "0", rows=[*GATED, "{oops"])
    assert proc.returncode == ExitCode.INVALID_INPUT
    assert "data.jsonl:5: not valid JSON" in proc.stderr


@pytest.mark.parametrize("command", ["local", "harbor"])
@pytest.mark.parametrize("code", list(ExitCode))
def test_local_and_harbor_exit_with_the_shared_runners_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str, code: ExitCode
) -> None:
    """Both commands hand the same gates to ``execute_run`` and exit with its code."""
    from osmo_run.cli import app

    seen: list[RunSettings] = []

    def execute_run(settings: RunSettings, *args: Any, **kwargs: Any) -> ExitCode:
        seen.append(settings)
        return code

    monkeypatch.setattr("osmo_run.run.executing.session.execute_run", execute_run)
    data = tmp_path / "data.jsonl"
    data.write_bytes(jsonl_bytes(GATED))
    where = ("--task-dir", str(REPO / "tasks" / "calculator")) if command == "harbor" else ()
    args = [command, str(data), *where, *REWARDED, "--code-dir", str(REPO)]
    args += ["--fail-under", "0.5", "--max-errors", "timeout=1", "--max-error-rate", "0.1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == code, result.output
    (settings,) = seen
    assert settings.gates.fail_under == 0.5
    assert [(b.category, b.limit, b.rate) for b in settings.gates.budgets] == [
        ("timeout", 1, False),
        (None, 0.1, True),
    ]


def test_harbor_invalid_input_exits_2_like_local(cli: CLI, write_jsonl: WriteJsonl) -> None:
    data = write_jsonl(GATED)
    missing = cli("harbor", data, *REWARDED, "--fail-under", "0.5")
    assert missing.returncode == ExitCode.INVALID_INPUT
    assert missing.stderr == "error: give --task-dir DIR (or harbor.task_dir in the spec)\n"
    task = REPO / "tasks" / "calculator"
    budget = cli("harbor", data, "--task-dir", task, *REWARDED, "--max-errors", "bogus=1")
    assert budget.returncode == ExitCode.INVALID_INPUT
    assert "--max-errors: 'bogus' is not an error category" in budget.stderr


# --- JUnit and Markdown reports from a real run -------------------------------------------

REPORTED: list[Row] = [
    *GATED,
    {"id": "unlabeled", "prompt": "hi", "metadata": {"reward": 1.0}},
]


@pytest.fixture(scope="module")
def reported_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run writing JUnit, --summary-md and $GITHUB_STEP_SUMMARY (pre-filled)."""
    tmp = tmp_path_factory.mktemp("reported")
    data = tmp / "smokedata.jsonl"
    data.write_bytes(jsonl_bytes(REPORTED))
    step = tmp / "step_summary.md"
    step.write_text("# set up Python: done\n", encoding="utf-8")
    junit, md = tmp / "reports" / "junit.xml", tmp / "reports" / "summary.md"
    proc = CLI(tmp).local(
        data,
        *REWARDED,
        "-o",
        tmp / "out" / "results.jsonl",
        "--junit-xml",
        junit,
        "--summary-md",
        md,
        "--fail-under",
        "0.9",
        env=cli_env(GITHUB_STEP_SUMMARY=str(step)),
    )
    return {"proc": proc, "junit": junit, "md": md, "step": step}


def test_run_writes_junit_an_independent_reader_accepts(reported_run: dict[str, Any]) -> None:
    assert reported_run["proc"].returncode == ExitCode.ROLLOUTS_FAILED
    xml = JUnitXml.fromfile(str(reported_run["junit"]))
    (suite,) = list(xml)
    assert suite.name == "smokedata"
    cases = {case.name: case for case in suite}
    assert sorted(cases) == sorted(str(row["id"]) for row in REPORTED if isinstance(row, dict))
    assert cases["full"].is_passed
    (below,) = cases["half"].result
    assert isinstance(below, Failure) and not isinstance(below, Error)
    (zero,) = cases["zero"].result
    assert isinstance(zero, Failure) and zero.message == "reward 0 below the pass threshold 1"
    (error,) = cases["late"].result
    assert isinstance(error, Error)
    assert (error.type, error.message) == ("timeout", "timeout (workflow)")
    assert "TimeoutError: scripted TimeoutError" in (error.text or "")
    (skipped,) = cases["unlabeled"].result
    assert isinstance(skipped, Skipped) and skipped.message == "row has no label"
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (5, 2, 1, 1)
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (5, 2, 1, 1)


def test_run_appends_markdown_to_the_step_summary(reported_run: dict[str, Any]) -> None:
    text = reported_run["step"].read_text(encoding="utf-8")
    first, _, appended = text.partition("\n")
    assert first == "# set up Python: done"  # appended, not overwritten
    lines = appended.splitlines()
    assert lines[0].startswith("## osmo-run: osmo-run local ")
    assert lines[0].endswith("— ❌ failed")
    assert f"- {FAIL_UNDER} 0.3, below the minimum 0.9" in lines
    header = lines.index(next(line for line in lines if line.startswith("| rollouts |")))
    assert lines[header + 2].startswith("| 5 | 4 | 1 | 0 | 3 | 0.3 | 0.5 | 0.2 |")
    assert "| timeout | 1 |" in lines  # the error histogram
    failed = [line for line in lines if line.startswith("| late |")]
    assert len(failed) == 1 and "| timeout | workflow |" in failed[0]
    assert appended == reported_run["md"].read_text(encoding="utf-8")  # --summary-md: same


@pytest.mark.parametrize("where", ["--junit-xml", "--summary-md", "GITHUB_STEP_SUMMARY", "-o"])
def test_an_unwritable_report_path_is_refused_before_any_row_runs(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path, where: str
) -> None:
    blocker = tmp_path / "FILE"  # a regular file where a directory would have to be
    blocker.write_text("", encoding="utf-8")
    target = blocker / "report.out"
    output = target if where == "-o" else tmp_path / "out" / "results.jsonl"
    flags = [] if where in ("-o", "GITHUB_STEP_SUMMARY") else [where, str(target)]
    env = cli_env(GITHUB_STEP_SUMMARY=str(target)) if where == "GITHUB_STEP_SUMMARY" else None
    data = write_jsonl([{"id": "r", "prompt": "hi", "metadata": {"calls": str(calls)}}])
    workflow = ("--workflow", "tests.workflows:CountingWorkflow")
    proc = cli.local(data, *workflow, "-o", output, *flags, env=env)
    assert proc.returncode == ExitCode.INVALID_INPUT, proc.stdout + proc.stderr
    name = "--output" if where == "-o" else where
    assert error_lines(proc.stderr) == [
        f"error: {name} {target}: {blocker} is a file, not a directory; give a path in a "
        "directory that can be created"
    ]
    assert list(calls.iterdir()) == []  # no row ran
    assert not (tmp_path / "out").exists()


def test_a_report_that_cannot_be_written_at_the_end_keeps_the_runs_verdict(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    """The JUnit path was writable when the run started; a workflow then made a directory
    of it. The run's verdict (passed: exit 0) stands, with one error line for the report."""
    junit = tmp_path / "reports" / "junit.xml"
    data = write_jsonl([{"id": "r", "prompt": "hi", "metadata": {"mkdir": str(junit)}}])
    output = tmp_path / "out" / "results.jsonl"
    workflow = ("--workflow", "tests.workflows:MkdirWorkflow")
    proc = cli.local(data, *workflow, "-o", output, "--junit-xml", junit, "--json")
    assert proc.returncode == ExitCode.OK, proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert f"error: --junit-xml {junit}: cannot write the report: Is a directory" in proc.stderr
    verdict = json.loads(proc.stdout)
    assert (verdict["exit_code"], verdict["passed"]) == (0, True)
    assert verdict["report_errors"] == [
        f"--junit-xml {junit}: cannot write the report: Is a directory"
    ]
    assert json.loads((output.parent / "results.summary.json").read_text())["total"] == 1


HOSTILE = "\x1b[31mred\x1b[0m <b>bold?</b> | *not* a_cell\nsecond line\rthird\u2028end"
"""An exception text with an ANSI colour, HTML and Markdown on its first line, then raw
line breaks (a newline, a carriage return, U+2028)."""


def test_plain_output_and_markdown_show_control_characters_on_one_line(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl(
        [{"id": "odd\x1b[2Jid", "prompt": "hi", "metadata": {"raise_env": "OSMO_TEST_TEXT"}}]
    )
    report = tmp_path / "summary.md"
    output = tmp_path / "out" / "results.jsonl"
    env = cli_env(OSMO_TEST_TEXT=HOSTILE)
    proc = cli.local(data, *SCRIPTED, "-o", output, "--plain", "--summary-md", report, env=env)
    assert proc.returncode == ExitCode.ROLLOUTS_FAILED, proc.stderr
    assert "\x1b" not in proc.stdout and "\r" not in proc.stdout and "\u2028" not in proc.stdout
    (failure,) = [line for line in proc.stdout.splitlines() if line.startswith("FAILURE")]
    assert failure.startswith("FAILURE row odd\\x1b[2Jid [agent_error, workflow]: RuntimeError: ")
    # the message is its first line (with where it was raised); the rest is in the file
    assert "the server refused \\x1b[31mred\\x1b[0m <b>bold?</b> | *not* a_cell (at " in failure
    [row_record] = read_jsonl(output)
    full_text = Path(row_record["backend"]["error_log"]).read_bytes().decode("utf-8")
    assert HOSTILE in full_text
    assert failure.endswith(f"(full text: {row_record['backend']['error_log']})")
    markdown = report.read_text(encoding="utf-8")
    assert "\x1b" not in markdown and "\r" not in markdown and "\u2028" not in markdown
    (row,) = [line for line in markdown.splitlines() if line.startswith("| odd")]
    assert row.startswith("| odd\\\\x1b\\[2Jid | agent_error | workflow | RuntimeError: ")
    assert "\\\\x1b\\[31mred\\\\x1b\\[0m &lt;b&gt;bold?&lt;/b&gt; \\| \\*not\\* a_cell" in row
    assert row.endswith(" |") and row.count(" | ") == 3  # four cells, none split by a pipe


# --- --json -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gate", "code"), [("0.375", ExitCode.OK), ("0.5", ExitCode.ROLLOUTS_FAILED)]
)
def test_json_prints_one_object_on_stdout_and_the_display_on_stderr(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, gate: str, code: ExitCode
) -> None:
    data = write_jsonl(GATED)
    printing = ("--workflow", "tests.workflows:PrintingWorkflow")
    grader = ("--grader", "tests.workflows:MetadataGrader")
    output = tmp_path / "out" / "results.jsonl"
    proc = cli.local(data, *printing, *grader, "-o", output, "--json", "--fail-under", gate)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout.count("\n") == 1 and proc.stdout.endswith("}\n"), proc.stdout
    verdict = json.loads(proc.stdout)
    assert verdict["exit_code"] == code
    assert verdict["passed"] is (code == ExitCode.OK)
    assert verdict["run_dir"] == str(output.parent)
    assert verdict["summary"] == json.loads((output.parent / "results.summary.json").read_text())
    assert verdict["summary"]["total"] == 4
    assert verdict["summary"]["by_status"] == {"success": 3, "failure": 1}
    if code == ExitCode.OK:
        assert verdict["gate_failures"] == []
    else:
        assert verdict["gate_failures"] == [
            {
                "gate": "--fail-under (mean reward, failures as 0)",
                "measured": 0.375,
                "threshold": 0.5,
                "kind": "quality",
            }
        ]
        assert f"{FAIL_UNDER} 0.375, below the minimum 0.5" in proc.stderr
    assert "Run summary" in proc.stderr
    assert "finished: 4/4 done" in proc.stderr
    assert "workflow says hello from full" in proc.stderr  # a workflow's print: off stdout
    assert "\x1b" not in proc.stdout + proc.stderr


# --- plain output -----------------------------------------------------------------------


@pytest.mark.slow
def test_plain_prints_at_most_one_progress_line_every_5_seconds(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    rows: list[Row] = [
        {"id": f"r{i}", "prompt": "hi", "metadata": {"sleep": 0.5}} for i in range(13)
    ]
    data = write_jsonl(rows)
    started = time.monotonic()
    proc = cli.local(data, *SCRIPTED, "-c", "1", "--plain", "-o", tmp_path / "o.jsonl")
    elapsed = time.monotonic() - started
    assert proc.returncode == ExitCode.OK, proc.stderr
    assert elapsed > 6.5
    progress = [line for line in proc.stdout.splitlines() if line.startswith("progress:")]
    assert 1 <= len(progress) <= int(elapsed // 5), proc.stdout
    assert "finished: 13/13 done" in proc.stdout
    assert "\x1b" not in proc.stdout + proc.stderr


def test_plain_on_a_terminal_has_no_control_codes_and_whole_gate_lines(
    write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    """CI runners often give a pseudo-terminal: --plain output stays plain there too."""
    data = write_jsonl(GATED)
    args = [str(OSMO_RUN), "local", str(data), "--code-dir", str(REPO), *REWARDED, "--plain"]
    args += ["-o", str(tmp_path / "o.jsonl"), "--fail-under", "0.9", "--max-errors", "0"]
    code, shown = run_on_a_terminal(args, tmp_path, cli_env(TERM="xterm-256color", COLUMNS="60"))
    assert code == ExitCode.ERROR_BUDGET_EXCEEDED
    text = shown.decode().replace("\r\n", "\n")
    assert "\x1b" not in text
    assert "gate failed: --max-errors measured 1, above the maximum 0\n" in text
    assert f"{FAIL_UNDER} 0.375, below the minimum 0.9\n" in text


# --- --smoke and --fail-fast ------------------------------------------------------------

TWENTY: list[Row] = [{"id": f"r{i:02d}", "prompt": "hi"} for i in range(20)]


def _row_ids(path: Path) -> list[str]:
    return sorted(record["row_id"] for record in read_jsonl(path))


def test_smoke_picks_the_same_rows_for_a_seed_and_others_for_another(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl(TWENTY)
    picked = {}
    for name, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        output = tmp_path / name / "results.jsonl"
        proc = cli.local(data, *SCRIPTED, "--smoke", "--seed", seed, "-o", output)
        assert proc.returncode == ExitCode.OK, proc.stderr
        picked[name] = _row_ids(output)
    assert len(picked["a"]) == 5  # the default --smoke-rows
    assert picked["a"] == picked["b"]
    assert picked["a"] != picked["c"]
    manifest = json.loads((tmp_path / "a" / "results.manifest.json").read_text())
    assert manifest["defining"]["smoke"] == {"rows": 5, "seed": 1}
    assert manifest["defining"]["rows"] == 5


@pytest.mark.parametrize(
    ("args", "count"),
    [(("--smoke-rows", "3"), 3), (("--smoke-rows", "50"), 20), (("--smoke-rows", "20"), 20)],
)
def test_smoke_rows_caps_the_count(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, args: tuple[str, ...], count: int
) -> None:
    output = tmp_path / "results.jsonl"
    proc = cli.local(write_jsonl(TWENTY), *SCRIPTED, "--smoke", *args, "-o", output)
    assert proc.returncode == ExitCode.OK, proc.stderr
    ids = _row_ids(output)
    assert len(ids) == len(set(ids)) == count


def test_smoke_within_a_shard_picks_smoke_rows_of_that_shard(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    output = tmp_path / "results.jsonl"
    args = ("--smoke", "--smoke-rows", "4", "--shard", "2/2", "--seed", "3", "-o", output)
    proc = cli.local(write_jsonl(TWENTY), *SCRIPTED, *args)
    assert proc.returncode == ExitCode.OK, proc.stderr
    indexes = [int(row_id[1:]) for row_id in _row_ids(output)]
    assert len(indexes) == 4
    assert all(index % 2 == 1 for index in indexes)  # shard 2/2: odd row indexes


@pytest.mark.parametrize(
    ("timeouts", "capped"),
    [
        ("{agent_sec: 600, grader_sec: null}", {"agent_sec": 60.0, "grader_sec": 60.0}),
        ("{agent_sec: 1.5, grader_sec: 90}", {"agent_sec": 1.5, "grader_sec": 60.0}),
    ],
)
def test_smoke_caps_timeouts_at_60_seconds(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, timeouts: str, capped: dict[str, float]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"workflow: tests.workflows:ScriptedWorkflow\ntimeouts: {timeouts}\n", encoding="utf-8"
    )
    output = tmp_path / "out" / "results.jsonl"
    proc = cli.local(write_jsonl(TWENTY[:3]), "--spec", spec, "--smoke", "-o", output)
    assert proc.returncode == ExitCode.OK, proc.stderr
    manifest = json.loads((output.parent / "results.manifest.json").read_text())
    assert manifest["defining"]["timeouts"] == capped


def test_fail_fast_starts_no_row_after_the_first_failure(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    rows: list[Row] = [
        {"id": "first", "prompt": "hi", "metadata": {"calls": str(calls), "raise": "ValueError"}},
        *({"id": f"later{i}", "prompt": "hi", "metadata": {"calls": str(calls)}} for i in range(4)),
    ]
    output = tmp_path / "out" / "results.jsonl"
    workflow = ("--workflow", "tests.workflows:CountingWorkflow")
    proc = cli.local(write_jsonl(rows), *workflow, "-c", "1", "--fail-fast", "-o", output)
    assert proc.returncode == ExitCode.ROLLOUTS_FAILED, proc.stderr
    assert sorted(p.name for p in calls.iterdir()) == ["first"]  # later rows never started
    assert _row_ids(output) == ["first"]
    summary = json.loads((output.parent / "results.summary.json").read_text())
    assert summary["stopped_early"] is True
    assert "fail-fast: a rollout failed; no further rows are started" in proc.stdout


def test_smoke_is_fail_fast_and_the_rows_it_did_not_run_count_as_failures(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    rows: list[Row] = [
        {"id": f"r{i:02d}", "prompt": "hi", "metadata": {"raise": "ZeroDivisionError"}}
        for i in range(20)
    ]
    output = tmp_path / "out" / "results.jsonl"
    args = ("--smoke", "--smoke-rows", "10", "-c", "1", "-o", output, "--max-errors", "5")
    proc = cli.local(write_jsonl(rows), *SCRIPTED, *args)
    # one error and nine rows never run: ten failures of ten, over the budget of five
    assert proc.returncode == ExitCode.ERROR_BUDGET_EXCEEDED, proc.stdout
    assert "gate failed: --max-errors measured 10, above the maximum 5" in proc.stdout
    assert len(read_jsonl(output)) == 1
    summary = json.loads((output.parent / "results.summary.json").read_text())
    assert (summary["stopped_early"], summary["not_run"]) == (True, 9)


@pytest.mark.parametrize(
    ("gate", "line"),
    [
        (("--fail-under", "0.5"), f"{FAIL_UNDER} 0.25, below the minimum 0.5"),
        (("--min-pass-rate", "0.5"), "gate failed: --min-pass-rate measured 0.25, below the mi"),
        (("--max-error-rate", "0.5"), "gate failed: --max-error-rate measured 0.75, above the m"),
    ],
)
def test_a_run_fail_fast_stopped_cannot_pass_a_gate_on_the_rows_it_happened_to_run(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, gate: tuple[str, str], line: str
) -> None:
    """Five rows pass, the sixth fails, fourteen never run: over the six that ran the mean
    was 0.83 and the step passed; over the twenty it was asked to judge, it is 0.25."""
    rows: list[Row] = [
        {"id": f"r{i:02d}", "prompt": "hi", "label": "x", "metadata": {"reward": 1.0}}
        for i in range(5)
    ]
    rows.append({"id": "r05", "prompt": "hi", "label": "x", "metadata": {"raise": "ValueError"}})
    rows += [
        {"id": f"r{i:02d}", "prompt": "hi", "label": "x", "metadata": {"reward": 1.0}}
        for i in range(6, 20)
    ]
    report = tmp_path / "summary.md"
    args = ("-c", "1", "--fail-fast", "--summary-md", report, *gate)
    proc = _gated(cli, write_jsonl, tmp_path, *args, rows=rows)
    assert proc.returncode != ExitCode.OK, proc.stdout
    assert line in proc.stdout
    assert "14 rollouts not run, counted as failures by the gates" in proc.stdout
    assert "- 14 rollouts not run (fail-fast stopped the run)" in report.read_text()


def test_without_fail_fast_every_row_runs(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    rows: list[Row] = [
        {"id": "first", "prompt": "hi", "metadata": {"raise": "ValueError"}},
        *({"id": f"later{i}", "prompt": "hi"} for i in range(4)),
    ]
    output = tmp_path / "out" / "results.jsonl"
    proc = cli.local(write_jsonl(rows), *SCRIPTED, "-c", "1", "-o", output)
    assert proc.returncode == ExitCode.ROLLOUTS_FAILED
    assert len(read_jsonl(output)) == 5
    assert (
        json.loads((output.parent / "results.summary.json").read_text())["stopped_early"] is False
    )
