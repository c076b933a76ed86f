"""The run's turns file (``llm.capture: tokens``): ``osmo-run local`` writes one compact
line per rollout that made calls beside its results, with exactly the ids the endpoint
sent, its secrets masked; ``--resume`` and ``--retry-errors`` never leave a rollout two
lines; an endpoint without ids is said once for the whole run."""

from __future__ import annotations

import json
import re
import resource
import subprocess
from pathlib import Path
from typing import Any

from osmo_run.errors import ExitCode
from osmo_run.sdk.turns import missing_ids_notice
from tests.conftest import CLI, OSMO_RUN, REPO, cli_env, read_jsonl
from tests.llm.stub_model import StubModel

ENV = {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
TURNS = "tests.llm.llm_workflows:TurnsWorkflow"


def _spec(tmp_path: Path, stub: StubModel, **llm: Any) -> Path:
    values: dict[str, Any] = {
        "workflow": TURNS,
        "code_dir": str(REPO),
        "concurrency": 4,
        "llm": {"base_url": stub.base_url, "model": "stub-model", "capture": "tokens", **llm},
    }
    spec = tmp_path / "spec.yaml"
    spec.write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in values.items()))
    return spec


def _data(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return data


def _run(cli: CLI, tmp_path: Path, spec: Path, data: Path, *flags: str, env: Any = None) -> Any:
    output = tmp_path / "out" / "results.jsonl"
    proc = cli(
        "local", data, "--spec", spec, "-o", output, "--display", "plain", *flags,
        env=cli_env(**ENV, **(env or {})), timeout=120,
    )  # fmt: skip
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc, output


def _ids(turn: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]:
    return (
        tuple(turn["prompt_token_ids"]),
        tuple(turn["completion_token_ids"]),
        tuple(turn["logprobs"]),
    )


def test_each_rollout_gets_one_compact_line_with_exactly_the_stubs_ids(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    stub_model.token_ids = True
    rows = [{"id": f"r{i}", "prompt": f"hello {i}", "metadata": {"turns": 3}} for i in range(4)]
    rows.append({"id": "fails", "prompt": "hi", "metadata": {"raise_after": 2}})
    proc, output = _run(cli, tmp_path, _spec(tmp_path, stub_model), _data(tmp_path, rows))
    assert proc.returncode == ExitCode.ROLLOUTS_FAILED, proc.stdout + proc.stderr

    turns_file = output.with_name("results.turns.jsonl")
    lines = read_jsonl(turns_file)
    assert sorted(line["rollout_id"] for line in lines) == ["fails", "r0", "r1", "r2", "r3"]
    by_id = {line["rollout_id"]: line["turns"] for line in lines}
    assert len(by_id["fails"]) == 2  # the failed rollout kept both of its calls
    assert all(len(by_id[f"r{i}"]) == 3 for i in range(4))
    sent = {_ids(answer) for answer in stub_model.token_answers}
    written = [_ids(turn) for turns in by_id.values() for turn in turns]
    assert len(written) == len(sent) == 14 and set(written) == sent
    # in call order: each turn's messages are the ones before plus its answer and a question
    r0 = by_id["r0"]
    assert [len(turn["messages"]) for turn in r0] == [1, 3, 5]
    assert r0[1]["messages"][1]["content"] == "You said: hello 0"
    # compact: no space inside an id array, logprobs as the stub sent them
    text = turns_file.read_text()
    assert re.search(r"\[\d+,\d+", text) and not re.search(r"\d, \d", text)
    assert "-0.015625,-0.03125,-0.046875" in text
    assert oct(turns_file.stat().st_mode & 0o777) == "0o600"


def test_secrets_in_messages_are_masked_in_the_turns_file(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    stub_model.token_ids = True
    secret = "sk-turns-secret-4242"
    rows = [{"id": "r0", "prompt": f"my key is {secret}", "metadata": {"turns": 2}}]
    spec = _spec(tmp_path, stub_model, api_key_env="STUB_KEY")
    proc, output = _run(cli, tmp_path, spec, _data(tmp_path, rows), env={"STUB_KEY": secret})
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    text = output.with_name("results.turns.jsonl").read_text()
    assert secret not in text
    (line,) = read_jsonl(output.with_name("results.turns.jsonl"))
    assert line["turns"][0]["messages"][0]["content"] == "my key is ***"
    assert (
        line["turns"][1]["completion_token_ids"]
        == stub_model.token_answers[1]["completion_token_ids"]
    )


def test_rerunning_a_rollout_leaves_it_one_line(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    stub_model.token_ids = True
    rows = [
        {"id": "ok", "prompt": "hi", "metadata": {"turns": 1}},
        {"id": "flaky", "prompt": "hi", "metadata": {"raise_after": 1}},
        {"id": "last", "prompt": "hi", "metadata": {"turns": 1}},
    ]
    spec, data = _spec(tmp_path, stub_model), _data(tmp_path, rows)
    proc, output = _run(cli, tmp_path, spec, data, "--concurrency", "1")
    turns_file = output.with_name("results.turns.jsonl")
    assert [line["rollout_id"] for line in read_jsonl(turns_file)] == ["ok", "flaky", "last"]

    # a crash that lost "last"'s result line but not its turns line: --resume runs it again
    results = output.read_text().splitlines(keepends=True)
    output.write_text("".join(r for r in results if '"row_id":"last"' not in r.replace(" ", "")))
    proc, _ = _run(cli, tmp_path, spec, data, "--resume")
    assert proc.returncode == ExitCode.ROLLOUTS_FAILED, proc.stdout + proc.stderr
    ids = [line["rollout_id"] for line in read_jsonl(turns_file)]
    assert sorted(ids) == ["flaky", "last", "ok"]

    proc, _ = _run(cli, tmp_path, spec, data, "--retry-errors")
    lines = read_jsonl(turns_file)
    assert sorted(line["rollout_id"] for line in lines) == ["flaky", "last", "ok"]
    (flaky,) = [line for line in lines if line["rollout_id"] == "flaky"]
    latest = stub_model.token_answers[-1]["completion_token_ids"]
    assert flaky["turns"][0]["completion_token_ids"] == latest  # the rerun's own call


def test_an_endpoint_without_ids_is_said_once_for_fifty_calls(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    rows = [{"id": f"r{i}", "prompt": "hi", "metadata": {"turns": 1}} for i in range(50)]
    proc, output = _run(cli, tmp_path, _spec(tmp_path, stub_model), _data(tmp_path, rows))
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    notice = missing_ids_notice(stub_model.endpoint.chat_completions_url)
    assert (proc.stdout + proc.stderr).count(notice) == 1
    lines = read_jsonl(output.with_name("results.turns.jsonl"))
    assert len(lines) == 50  # recorded with what came
    assert {line["turns"][0]["finish_reason"] for line in lines} == {"stop"}
    assert {line["turns"][0]["completion_token_ids"] for line in lines} == {None}


def test_the_turns_file_is_refused_as_the_dataset(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    data = tmp_path / "out" / "results.turns.jsonl"
    data.parent.mkdir()
    data.write_text(json.dumps({"id": "r0", "prompt": "hi"}) + "\n")
    proc, _ = _run(cli, tmp_path, _spec(tmp_path, stub_model), data)
    assert proc.returncode != ExitCode.OK
    assert "--output's turns file" in proc.stderr and "which this command reads" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_rollouts_in_child_processes_bring_their_turns_back(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    """``isolation: process``: each workflow runs in a child of its own, which captures
    and hands its turns back with its result."""
    stub_model.token_ids = True
    spec = _spec(tmp_path, stub_model)
    spec.write_text(spec.read_text() + 'isolation: "process"\n')
    rows = [{"id": f"r{i}", "prompt": "hi", "metadata": {"turns": 2}} for i in range(2)]
    proc, output = _run(cli, tmp_path, spec, _data(tmp_path, rows))
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    lines = read_jsonl(output.with_name("results.turns.jsonl"))
    assert sorted(line["rollout_id"] for line in lines) == ["r0", "r1"]
    written = {_ids(turn) for line in lines for turn in line["turns"]}
    assert written == {_ids(answer) for answer in stub_model.token_answers}
    assert len(written) == 4


def test_a_turns_line_that_could_not_be_written_runs_its_rollout_again(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    """The result line is a rollout's commit point: its turns line is written first, so a
    run that stops between the two (a crash, a full disk, a file-size limit) leaves a
    rollout that ``--resume`` runs again, never a kept result whose turns are gone."""
    stub_model.token_ids = True
    stub_model.prompt_ids = 60_000  # a turns line of about 480 kB, a result line of 2 kB
    rows = [{"id": f"r{i}", "prompt": "hi", "metadata": {"turns": 1}} for i in range(6)]
    spec, data = _spec(tmp_path, stub_model), _data(tmp_path, rows)
    output = tmp_path / "out" / "results.jsonl"

    def small_files() -> None:  # Python ignores SIGXFSZ: a write past it fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_200_000, 1_200_000))

    proc = subprocess.run(
        [str(OSMO_RUN), "local", str(data), "--spec", str(spec), "-o", str(output),
         "--display", "plain", "--concurrency", "1"],
        cwd=tmp_path, env=cli_env(**ENV), capture_output=True, text=True, timeout=120,
        preexec_fn=small_files,
    )  # fmt: skip
    assert proc.returncode != ExitCode.OK, proc.stdout + proc.stderr
    assert "results.turns.jsonl" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    turns_file = output.with_name("results.turns.jsonl")
    assert 0 < len(read_jsonl(output)) < len(rows)

    proc, _ = _run(cli, tmp_path, spec, data, "--resume")
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    results = sorted(line["rollout_id"] for line in read_jsonl(output))
    turns = sorted(line["rollout_id"] for line in read_jsonl(turns_file))
    assert results == turns == sorted(row["id"] for row in rows)


def test_a_regraded_run_keeps_the_turns_its_workflows_made(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    """A regrade runs no workflow again, so the calls it grades are the run's own: the new
    run directory carries them, and a second regrade replaces them rather than adding."""
    stub_model.token_ids = True
    rows = [{"id": f"r{i}", "prompt": f"hello {i}", "metadata": {"turns": 2}} for i in range(3)]
    proc, output = _run(cli, tmp_path, _spec(tmp_path, stub_model), _data(tmp_path, rows))
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    source = output.with_name("results.turns.jsonl").read_bytes()

    for _ in range(2):
        proc = cli(
            "regrade", output.parent, "--grader", "tests.workflows:SampleGrader", "--overwrite",
            env=cli_env(**ENV), timeout=120,
        )  # fmt: skip
        assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    (regraded,) = [p for p in output.parent.parent.iterdir() if "regrade" in p.name]
    turns = regraded / "results.turns.jsonl"
    assert turns.read_bytes() == source
    assert oct(turns.stat().st_mode & 0o777) == "0o600"
    assert len(read_jsonl(regraded / "results.jsonl")) == 3
