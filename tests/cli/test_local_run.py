"""``osmo-run local`` end to end: exit codes, error lines, output and summary files."""

from __future__ import annotations

import json
import re
import stat
from collections import Counter
from pathlib import Path

import pytest
import yaml

from osmo_run.run.writing.records import OutputRecord
from tests.conftest import (
    CLI,
    OSMO_RUN,
    REPO,
    SCRIPTED,
    SCRIPTED_GRADED,
    Row,
    WriteJsonl,
    cli_env,
    error_lines,
    read_jsonl,
    run_on_a_terminal,
)

MIXED: list[Row] = [
    {"id": "right", "prompt": "hi", "label": "hi"},
    {"id": "wrong", "prompt": "hi", "label": "bye"},
    {"id": "zero", "prompt": "hi", "label": "hi", "metadata": {"raise": "ZeroDivisionError"}},
    {"id": "value", "prompt": "hi", "label": "hi", "metadata": {"raise": "ValueError"}},
    {"id": "slow", "prompt": "hi", "label": "hi", "metadata": {"sleep": 5}},
    {"id": "unlabeled", "prompt": "hi"},
]


def test_all_rows_succeeding_exits_0(cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path) -> None:
    data = write_jsonl([{"prompt": "hi", "label": "hi"}] * 3)
    proc = cli.local(data, *SCRIPTED_GRADED, "-o", tmp_path / "out.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "Run summary" in proc.stdout
    assert [line["reward"] for line in read_jsonl(tmp_path / "out.jsonl")] == [1.0, 1.0, 1.0]


def test_some_rows_failing_exits_1_with_matching_output_and_summary(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    output = tmp_path / "out" / "results.jsonl"
    proc = cli.local(write_jsonl(MIXED), *SCRIPTED_GRADED, "--agent-timeout", "0.3", "-o", output)
    assert proc.returncode == 1, proc.stderr
    lines = read_jsonl(output)
    assert len(lines) == len(MIXED)
    for line in lines:
        OutputRecord.model_validate(line)
    row_ids = ["right", "wrong", "zero", "value", "slow", "unlabeled"]
    assert sorted(line["row_id"] for line in lines) == sorted(row_ids)
    summary = json.loads((tmp_path / "out" / "results.summary.json").read_text())
    assert summary["error_categories"] == dict(
        Counter(line["error_category"] for line in lines if line["error_category"])
    )
    assert summary["error_categories"] == {"agent_error": 1, "validation_error": 1, "timeout": 1}
    assert summary["by_status"] == {"success": 3, "failure": 3}
    assert summary["grader_skipped"] == {"row has no label": 1}
    assert summary["reward"]["mean_all"] == pytest.approx(1 / 6)
    assert summary["reward"]["mean_graded"] == pytest.approx(1 / 2)
    assert summary["interrupted"] is False
    assert stat.S_IMODE(output.stat().st_mode) == 0o600


def test_default_output_goes_under_runs_in_the_working_directory(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    proc = cli.local(write_jsonl([{"prompt": "hi"}], name="mydata.jsonl"), *SCRIPTED)
    assert proc.returncode == 0, proc.stderr
    (output,) = (tmp_path / "runs").glob("mydata-*/results.jsonl")
    assert len(read_jsonl(output)) == 1
    assert (output.parent / "results.summary.json").is_file()


def test_api_key_is_masked_in_files_and_on_screen(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    key = "sk-test-7f3a9c1e5b"
    spec = tmp_path / "conf" / "spec.yaml"
    spec.parent.mkdir()
    spec.write_text(
        "workflow: tests.workflows:ScriptedWorkflow\n"
        "llm: {base_url: 'http://127.0.0.1:9/v1', model: m, api_key_env: OSMO_TEST_API_KEY}\n"
        "output: out.jsonl\n"  # relative to the spec's directory
    )
    data = write_jsonl(
        [
            {"id": "says", "prompt": "hi", "metadata": {"reply_env": "OSMO_TEST_API_KEY"}},
            {"id": "raises", "prompt": "hi", "metadata": {"raise_env": "OSMO_TEST_API_KEY"}},
        ]
    )
    proc = cli.local(data, "--spec", spec, "--display", "plain", env=cli_env(OSMO_TEST_API_KEY=key))
    assert proc.returncode == 1, proc.stderr
    output = tmp_path / "conf" / "out.jsonl"
    rows = {line["row_id"]: line for line in read_jsonl(output)}
    assert rows["says"]["sample"]["messages"][-1] == {"role": "assistant", "content": "***"}
    assert rows["raises"]["error_message"].startswith("RuntimeError: the server refused *** (at ")
    assert "FAILURE row raises [agent_error, workflow]: RuntimeError: the server refused ***" in (
        proc.stdout
    )
    for path in (output, tmp_path / "conf" / "out.summary.json"):
        assert key not in path.read_text()
    assert key not in proc.stdout + proc.stderr


@pytest.mark.parametrize("key", ["1", "e"])
def test_a_one_character_api_key_leaves_the_run_readable_reportable_and_resumable(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, key: str
) -> None:
    """A key as short as ``1`` or ``e`` occurs in field names and numbers: it is masked in
    the values workflows produced, and nothing else, so the run stays a run."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workflow: tests.workflows:ScriptedWorkflow\n"
        "llm: {base_url: 'http://127.0.0.1:9/v1', model: m, api_key_env: OSMO_TEST_API_KEY}\n"
    )
    data = write_jsonl(
        [
            {"id": "k1e", "prompt": "hi", "metadata": {"reply_env": "OSMO_TEST_API_KEY"}},
            {"id": "k2e", "prompt": "hi", "metadata": {"raise_env": "OSMO_TEST_API_KEY"}},
        ]
    )
    output = tmp_path / "out" / "results.jsonl"
    env = cli_env(OSMO_TEST_API_KEY=key)
    proc = cli.local(data, "--spec", spec, "-o", output, "--display", "plain", env=env)
    assert proc.returncode == 1, proc.stderr
    rows = {line["row_id"]: line for line in read_jsonl(output)}  # every line parses
    assert sorted(rows) == ["k1e", "k2e"]
    for line in rows.values():
        OutputRecord.model_validate(line)
    assert rows["k1e"]["sample"]["messages"][-1] == {"role": "assistant", "content": "***"}
    assert rows["k2e"]["error_message"].endswith(" in run)")  # one character: masked everywhere
    assert key not in rows["k2e"]["error_message"]
    report = cli("report", output.parent)
    assert re.search(r"rows\s+2 \(success 1 · failure 1\)", report.stdout), report.stdout
    assert "partial run" not in report.stdout
    resumed = cli.local(
        data, "--spec", spec, "-o", output, "--resume", "--display", "plain", env=env
    )
    assert resumed.returncode == 1, resumed.stderr
    assert "0 rows (2 kept from before)" in resumed.stdout
    assert len(read_jsonl(output)) == 2


def test_existing_output_is_refused_without_overwrite(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    output = tmp_path / "out.jsonl"
    output.write_text('{"old": true}\n')
    data = write_jsonl([{"prompt": "hi", "metadata": {"raise": "RuntimeError"}}])
    proc = cli.local(data, *SCRIPTED, "-o", output)
    assert proc.returncode == 2
    assert error_lines(proc.stderr)[0] == (
        f"error: {output}: already holds results of this run; pass --resume to continue "
        "it, --retry-errors to rerun its failures, or --overwrite to start over"
    )
    assert output.read_text() == '{"old": true}\n'
    assert not (tmp_path / "out.summary.json").exists()
    proc = cli.local(data, *SCRIPTED, "-o", output, "--overwrite")
    assert proc.returncode == 1
    assert [line["error_category"] for line in read_jsonl(output)] == ["agent_error"]


def test_bad_spec_field_exits_2_naming_the_field(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("workflow: tests.workflows:ScriptedWorkflow\ntimeouts: {agnet_sec: 1}\n")
    proc = cli.local(write_jsonl([{"prompt": "hi"}]), "--spec", spec)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: {spec}: field 'timeouts.agnet_sec': unknown field; did you mean 'agent_sec'?"
    ]
    assert not (tmp_path / "runs").exists()


def test_bad_dataset_line_exits_2_naming_file_and_line(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl([{"prompt": "hi"}, '{"prompt": "hi",}', {"prompt": "hi"}])
    proc = cli.local(data, *SCRIPTED, "-o", tmp_path / "out.jsonl")
    assert proc.returncode == 2
    lines = error_lines(proc.stderr)
    assert lines[0].startswith(f"error: {data}:2: not valid JSON (")
    assert "nothing was run" in lines[1]
    assert not (tmp_path / "out.jsonl").exists()


def test_bad_rows_record_runs_the_rest(cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path) -> None:
    data = write_jsonl([{"prompt": "hi"}, '{"prompt": "hi",}', {"prompt": "hi"}])
    proc = cli.local(data, *SCRIPTED, "--bad-rows", "record", "-o", tmp_path / "out.jsonl")
    assert proc.returncode == 1
    lines = read_jsonl(tmp_path / "out.jsonl")
    assert Counter(line["status"] for line in lines) == {"success": 2, "failure": 1}
    (bad,) = (line for line in lines if line["status"] == "failure")
    assert (bad["row_id"], bad["error_category"], bad["error_phase"]) == (
        "2",
        "validation_error",
        "setup",
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("missing.jsonl", *SCRIPTED), "error: missing.jsonl: dataset file not found"),
        (
            ("data.jsonl", *SCRIPTED, "--display", "fancy"),
            "error: --display: 'fancy' is not one of auto, live, plain, none",
        ),
        (
            ("data.jsonl", "--workflow", "tests.workflows:Nope"),
            "error: workflow: module 'tests.workflows' has no attribute 'Nope'",
        ),
        (
            ("data.jsonl",),
            "error: give a run spec with --spec FILE, or a workflow with --workflow module:Class",
        ),
        (
            ("data.jsonl", *SCRIPTED, "--spec", "nope.yaml"),
            "error: nope.yaml: spec file not found",
        ),
    ],
    ids=["missing-dataset", "bad-display", "bad-import-path", "no-workflow", "missing-spec"],
)
def test_bad_invocation_exits_2_with_one_error_line(
    cli: CLI, write_jsonl: WriteJsonl, args: tuple[str, ...], expected: str
) -> None:
    write_jsonl([{"prompt": "hi"}])
    proc = cli.local(Path(args[0]), *args[1:])
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [expected]


@pytest.mark.parametrize("display", [("--display", "plain"), ()], ids=["plain", "not-a-tty"])
def test_output_without_a_terminal_has_no_control_codes(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, display: tuple[str, ...]
) -> None:
    data = write_jsonl(MIXED[:4])
    env = cli_env(TERM="xterm-256color")
    proc = cli.local(data, *SCRIPTED_GRADED, *display, "-o", tmp_path / "out.jsonl", env=env)
    assert proc.returncode == 1
    assert "FAILURE row zero [agent_error, workflow]: ZeroDivisionError" in proc.stdout
    assert "Run summary" in proc.stdout
    assert "\x1b" not in proc.stdout + proc.stderr


def test_plain_display_has_no_control_codes_on_a_terminal_either(
    write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    """CI runners often give a pseudo-terminal; --display plain must still be plain."""
    data = write_jsonl(MIXED[:4])
    args = [str(OSMO_RUN), "local", str(data), "--code-dir", str(REPO), *SCRIPTED_GRADED]
    args += ["--display", "plain", "-o", str(tmp_path / "out.jsonl")]
    code, shown = run_on_a_terminal(args, tmp_path, cli_env(TERM="xterm-256color"))
    assert code == 1
    assert b"Run summary" in shown
    assert b"\x1b" not in shown


def test_help_lists_the_commands(cli: CLI) -> None:
    proc = cli("--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("local", "harbor", "schema"):
        assert command in proc.stdout
    proc = cli("local", "--help")
    assert proc.returncode == 0
    assert "--overwrite" in proc.stdout and "--bad-rows" in proc.stdout


def test_schema_prints_the_spec_json_schema(cli: CLI) -> None:
    proc = cli("schema")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert "workflow" in schema["properties"]
    assert schema["required"] == ["workflow"]
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator
    validator.check_schema(schema)
    example = yaml.safe_load((REPO / "configs" / "example.yaml").read_text())
    validator(schema).validate(example)
    assert not validator(schema).is_valid({**example, "timeouts": {"agnet_sec": 1}})
