"""The systemic-failure breaker through the real ``osmo-run local``: a dead model endpoint
stops the run after K rows with one line and exit 5, ``--resume`` completes it once the
endpoint is up; failures of the rows themselves, and failures with different causes, never
stop a run; ``--no-breaker`` and ``breaker: off`` run every row.

The model endpoint is the stub of :mod:`tests.llm.stub_model` (it stands in for a paid
model API, which cannot be reached here); the dead endpoint is a port nothing listens on,
reached through ``osmo_run.sdk.llm.chat_completion`` like any workflow reaches its model.
"""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from osmo_run.errors import ExitCode
from tests.conftest import CLI, REPO, WriteJsonl, cli_env, error_lines, read_jsonl
from tests.llm.stub_model import StubModel, serve

API_KEY = "sk-breaker-5f4e3d2c1b0a"
ENV = {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", "OSMO_TEST_LLM_KEY": API_KEY}
CHAT = "tests.llm.llm_workflows:EndpointWorkflow"
STOPPED = "stopped by the breaker: "


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


def _spec(tmp_path: Path, base_url: str, *raw: str, **fields: Any) -> Path:
    """A spec reaching ``base_url``, ``fields`` laid over the defaults and ``raw`` YAML lines
    added as they are. The deadline ends a call's retries of a dead endpoint (each retry's
    wait is given up once it would pass it, so a row ends with the endpoint's error); 3 s,
    because a first try still under way at the deadline is rightly a timeout, and a loaded
    machine can take a second to make one. The one run-level retry shows that the breaker
    counts rows' final results."""
    values: dict[str, Any] = {
        "workflow": CHAT,
        "code_dir": str(REPO),
        "concurrency": 2,
        "timeouts": {"agent_sec": 3, "grader_sec": 2},
        "retries": {"max_attempts": 2, "initial_backoff_sec": 0.05},
        "llm": {"base_url": base_url, "model": "stub-model"},
        **fields,
    }
    spec = tmp_path / "spec.yaml"
    lines = [f"{key}: {json.dumps(value)}" for key, value in values.items()]
    spec.write_text("\n".join([*lines, *raw]) + "\n")
    return spec


def _rows(n: int, **metadata: Any) -> list[dict[str, Any]]:
    return [
        {"id": f"r{i:02d}", "prompt": "hello", "label": "hello", "metadata": metadata}
        for i in range(n)
    ]


def _run(cli: CLI, data: Path, spec: Path, *args: str | Path) -> tuple[int, list[str], Path]:
    output = cli.cwd / "out" / "results.jsonl"
    proc = cli(
        "local", data, "--spec", spec, "-o", output, "--display", "plain", *args, env=cli_env(**ENV)
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.returncode, (proc.stdout + proc.stderr).splitlines(), output


def _stopped_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(STOPPED)]


@pytest.fixture
def dead_port() -> Iterator[int]:
    yield _free_port()


def test_a_dead_endpoint_stops_after_k_rows_and_resume_completes_the_run(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, dead_port: int
) -> None:
    base_url = f"http://127.0.0.1:{dead_port}/v1"
    data = write_jsonl(_rows(20))
    llm = {"base_url": base_url, "model": "stub-model", "api_key_env": "OSMO_TEST_LLM_KEY"}
    spec = _spec(tmp_path, base_url, llm=llm)

    code, lines, output = _run(cli, data, spec)

    assert code == ExitCode.SYSTEMIC_FAILURE == 5, "\n".join(lines)
    records = read_jsonl(output)
    # 5 in a row trip it; the 1 other row in flight then (concurrency 2) finishes too
    assert 5 <= len(records) <= 6
    assert {(r["status"], r["error_category"]) for r in records} == {("failure", "model_api_error")}
    not_started = 20 - len(records)
    (line,) = _stopped_lines(lines)
    assert line.startswith(
        f"{STOPPED}5 rollouts in a row failed with model_api_error: ModelAPIError: cannot "
        f"reach {base_url}/chat/completions"
    )
    assert f"; {not_started} rows not started; " in line
    assert "--resume" in line
    summary = json.loads(output.with_name("results.summary.json").read_text())
    assert summary["not_run"] == not_started
    breaker = summary["breaker"]
    assert (breaker["tripped"], breaker["after"], breaker["category"]) == (
        True,
        5,
        "model_api_error",
    )
    assert breaker["not_started"] == not_started and len(breaker["rollouts"]) == 5
    # the breaker counts final results: the rows that tripped it had their run-level retry
    # (a row in flight waiting for its retry then is recorded with its first failure)
    attempts = {r["row_id"]: len(r["attempts"]) for r in records}
    assert [attempts[row] for row in breaker["rollouts"]] == [1] * 5
    assert str(dead_port) not in breaker["cause"], "the cause masks addresses"
    assert not any(API_KEY in line for line in lines)
    for path in (p for p in output.parent.iterdir() if p.is_file()):
        assert API_KEY not in path.read_text(), path

    # the endpoint comes up where it was missing: --resume runs the rest, and the rows
    # that failed with the cause the run stopped on
    stub = StubModel(port=dead_port)
    for model in serve(stub):
        code, lines, output = _run(cli, data, spec, "--resume")
        assert code == ExitCode.OK, "\n".join(lines)
        assert len(model.requests) == 20, "every row asked the model once, none twice"
        assert {request.auth for request in model.requests} == {f"Bearer {API_KEY}"}
    records = read_jsonl(output)
    assert Counter(r["row_id"] for r in records) == Counter(f"r{i:02d}" for i in range(20))
    assert {r["status"] for r in records} == {"success"}
    reran = [r for r in records if r["attempts"]]
    assert len(reran) == 20 - not_started, "the failed rows kept their earlier attempts"
    assert (
        f"--resume: the breaker stopped this run on model_api_error; the {20 - not_started} "
        "rollouts that failed with its cause run again, with the rows not started"
    ) in lines
    assert not _stopped_lines(lines)
    assert json.loads(output.with_name("results.summary.json").read_text())["breaker"] is None


def test_rows_in_flight_when_it_trips_finish_and_are_recorded(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, dead_port: int
) -> None:
    data = write_jsonl(_rows(30))
    # 3 s: every row gives up on the dead endpoint before its deadline even on a busy box (a
    # timeout in between would reset the streak and let more rows start before the trip)
    timeouts = {"agent_sec": 3, "grader_sec": 2}
    spec = _spec(tmp_path, f"http://127.0.0.1:{dead_port}/v1", concurrency=6, timeouts=timeouts)
    report = tmp_path / "report.md"
    code, lines, output = _run(cli, data, spec, "--breaker", "3", "--json", "--summary-md", report)
    assert code == ExitCode.SYSTEMIC_FAILURE, "\n".join(lines)
    records = read_jsonl(output)
    assert 3 <= len(records) <= 3 + 5
    assert {r["status"] for r in records} == {"failure"}, "none cancelled, none lost"
    summary = json.loads(output.with_name("results.summary.json").read_text())
    in_flight = summary["breaker"]["in_flight"]
    assert len(records) == 3 + in_flight
    (verdict_line,) = [line for line in lines if line.startswith('{"exit_code"')]
    verdict = json.loads(verdict_line)
    assert (verdict["exit_code"], verdict["passed"]) == (5, False)
    (line,) = _stopped_lines(lines)
    assert f"{30 - len(records)} rows not started" in line
    markdown = report.read_text()
    assert "— ❌ failed" in markdown and "- stopped by the breaker: 3 rollouts in a row" in markdown
    assert f"- {30 - len(records)} rollouts not run (the breaker stopped the run)" in markdown


def test_an_endpoint_that_keeps_answering_429_trips_it_after_the_retries(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, stub_model: StubModel
) -> None:
    rows = [{"id": f"r{i:02d}", "prompt": "please 429"} for i in range(10)]
    data = write_jsonl(rows)
    # 3 s, not 1: on a busy box the first 429 itself may take a second to come back, and a
    # row with no answer yet is rightly a timeout (one waiting out a retry is not: the
    # rollout fails with the rate limit it got)
    # A fixed model limit: under the adaptive one, an endpoint answering nothing but 429
    # brings the limit down to one slot, and on a busy box a row can spend its deadline
    # waiting for that slot without sending a call: rightly a timeout (the README: the
    # deadline keeps running while a call waits), but not what this test is about.
    spec = _spec(
        tmp_path,
        stub_model.base_url,
        timeouts={"agent_sec": 3, "grader_sec": 2},
        llm={"base_url": stub_model.base_url, "model": "stub-model", "max_concurrency": 2},
    )
    code, lines, output = _run(cli, data, spec, "--breaker", "3")
    assert code == ExitCode.SYSTEMIC_FAILURE, "\n".join(lines)
    records = read_jsonl(output)
    assert {r["error_category"] for r in records} == {"rate_limit"}
    (line,) = _stopped_lines(lines)
    assert "failed with rate_limit: RateLimitError: " in line and "answered HTTP 429" in line
    # the rows that tripped it had their run-level retry (`retries:`) too
    summary = json.loads(output.with_name("results.summary.json").read_text())
    attempts = {r["row_id"]: len(r["attempts"]) for r in records}
    assert [attempts[row] for row in summary["breaker"]["rollouts"]] == [1, 1, 1]


@pytest.mark.parametrize(
    ("workflow", "metadata", "category"),
    [
        ("tests.workflows:ScriptedWorkflow", {"raise": "RuntimeError"}, "agent_error"),
        ("tests.workflows:ScriptedWorkflow", {"grade": "raise:RuntimeError"}, "agent_error"),
        ("tests.workflows:ScriptedWorkflow", {"grade": "raise:ValueError"}, "validation_error"),
        ("tests.workflows:ScriptedWorkflow", {"sleep": 5}, "timeout"),
    ],
    ids=["agent-error", "grader-error", "grader-validation", "timeout"],
)
def test_failures_of_the_rows_themselves_never_trip_it(
    cli: CLI,
    write_jsonl: WriteJsonl,
    tmp_path: Path,
    workflow: str,
    metadata: dict[str, Any],
    category: str,
) -> None:
    data = write_jsonl(_rows(8, **metadata))
    spec = _spec(
        tmp_path,
        "http://127.0.0.1:9/v1",
        workflow=workflow,
        grader="tests.workflows:ScriptedGrader",
        timeouts={"agent_sec": 0.2, "grader_sec": 2},
    )
    code, lines, output = _run(cli, data, spec, "--breaker", "2")
    assert code == ExitCode.ROLLOUTS_FAILED, "\n".join(lines)
    records = read_jsonl(output)
    assert len(records) == 8
    assert {r["error_category"] for r in records} == {category}
    assert not _stopped_lines(lines)
    assert json.loads(output.with_name("results.summary.json").read_text())["breaker"] is None


def test_failures_with_different_causes_never_trip_it(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, stub_model: StubModel, dead_port: int
) -> None:
    """Every row fails with model_api_error, but alternately for two causes: the stub's
    HTTP 500 and a refused connection. One at a time, so they alternate as they finish."""
    dead = f"http://127.0.0.1:{dead_port}/v1"
    rows = [
        {"id": f"r{i:02d}", "prompt": "please 500", "metadata": {"base_url": dead} if i % 2 else {}}
        for i in range(8)
    ]
    data = write_jsonl(rows)
    # 3 s, not 1: rows end as model_api_error (their retries given up before the deadline);
    # a busy machine can still turn one into a timeout, which never trips the breaker either
    timeouts = {"agent_sec": 3, "grader_sec": 2}
    spec = _spec(tmp_path, stub_model.base_url, concurrency=1, timeouts=timeouts)
    code, lines, output = _run(cli, data, spec, "--breaker", "2")
    assert code == ExitCode.ROLLOUTS_FAILED, "\n".join(lines)
    records = read_jsonl(output)
    assert len(records) == 8
    assert {r["error_category"] for r in records} <= {"model_api_error", "timeout"}
    systemic = [r["error_message"] for r in records if r["error_category"] == "model_api_error"]
    assert len(systemic) >= 6, systemic  # both causes, alternating
    assert any("answered HTTP 500" in m for m in systemic)
    assert any("cannot reach" in m for m in systemic)
    assert not _stopped_lines(lines)


@pytest.mark.parametrize("how", ["flag", "spec"])
def test_no_breaker_runs_every_row(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, dead_port: int, how: str
) -> None:
    data = write_jsonl(_rows(8))
    extra = ("breaker: off",) if how == "spec" else ()  # YAML's bare off: false
    spec = _spec(tmp_path, f"http://127.0.0.1:{dead_port}/v1", *extra)
    code, lines, output = _run(cli, data, spec, *(["--no-breaker"] if how == "flag" else []))
    assert code == ExitCode.ROLLOUTS_FAILED, "\n".join(lines)
    records = read_jsonl(output)
    assert len(records) == 8
    assert {r["error_category"] for r in records} == {"model_api_error"}
    assert not _stopped_lines(lines)


@pytest.mark.parametrize(
    ("extra", "args", "expected"),
    [
        ((), ("--breaker", "3", "--no-breaker"), "--breaker 3 sets when the breaker stops"),
        (("breaker: 0",), (), "field 'breaker': Value error, must be a number of rollouts"),
        (("breaker: sometimes",), (), "or off to turn it off"),
    ],
    ids=["both-flags", "zero", "word"],
)
def test_a_bad_breaker_setting_is_one_line_and_exit_2(
    cli: CLI,
    write_jsonl: WriteJsonl,
    tmp_path: Path,
    extra: tuple[str, ...],
    args: tuple[str, ...],
    expected: str,
) -> None:
    data = write_jsonl(_rows(3))
    spec = _spec(tmp_path, "http://127.0.0.1:9/v1", *extra)
    output = tmp_path / "out" / "results.jsonl"
    proc = cli("local", data, "--spec", spec, "-o", output, *args, env=cli_env(**ENV))
    assert proc.returncode == ExitCode.INVALID_INPUT
    (line,) = error_lines(proc.stderr)
    assert expected in line
    assert not output.exists(), "nothing ran"
