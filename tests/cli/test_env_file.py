"""``--env-file``: the file's variables reach the run (the API key its endpoint gets, the
workflow's environment) and never its outputs; a bad file is one ``file:line`` error, exit 2,
with the line's text (which may hold a secret) left out."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CLI, REPO, cli_env, error_lines, read_jsonl
from tests.llm.stub_model import StubModel, serve


@pytest.fixture
def stub_model() -> Iterator[StubModel]:
    """The OpenAI-compatible stub on 127.0.0.1 (it stands in for a paid model API)."""
    yield from serve(StubModel())


def _spec(tmp_path: Path, base_url: str) -> Path:
    spec = tmp_path / "spec.yaml"
    llm = {"base_url": base_url, "model": "stub-model", "api_key_env": "OSMO_RUN_TEST_KEY"}
    workflow = "tests.cli.env_workflows:EnvChatWorkflow"
    spec.write_text(json.dumps({"workflow": workflow, "code_dir": str(REPO), "llm": llm}))
    return spec


def _files_holding(directory: Path, needle: bytes) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_the_env_files_key_reaches_the_endpoint_and_no_output_holds_it(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    secret = f"sk-test-{secrets.token_hex(16)}"
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# the run's secrets\n"
        f"export OSMO_RUN_TEST_KEY='{secret}'\n"
        "\n"
        'OSMO_RUN_TEST_GREETING="hello from the env file"\n'
    )
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "hi"}) + "\n" for i in range(3)))
    out = tmp_path / "run" / "results.jsonl"
    args = ("local", data, "--spec", _spec(tmp_path, stub_model.base_url), "-o", out)
    env = cli_env(OSMO_RUN_TEST_KEY="the environment's value, overridden")
    proc = cli.subprocess(
        *args,
        "--env-file",
        env_file,
        "--junit-xml",
        tmp_path / "run/j.xml",
        "--summary-md",
        tmp_path / "run/s.md",
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = read_jsonl(out)
    assert [row["status"] for row in rows] == ["success"] * 3
    assert all(row["sample"]["metrics"]["greeting"] == 1 for row in rows)
    assert {r.auth for r in stub_model.requests} == {f"Bearer {secret}"}
    assert secret not in proc.stdout + proc.stderr
    assert len(list((tmp_path / "run").rglob("*"))) >= 5  # results, manifest, summary, reports
    assert _files_holding(tmp_path / "run", secret.encode()) == []


def test_without_the_env_file_the_unset_key_is_named(cli: CLI, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    env = {k: v for k, v in cli_env().items() if k != "OSMO_RUN_TEST_KEY"}
    proc = cli("local", data, "--spec", _spec(tmp_path, "http://127.0.0.1:9/v1"), env=env)
    assert proc.returncode == 2
    assert any("OSMO_RUN_TEST_KEY is not set" in line for line in error_lines(proc.stderr))


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("A=1\n\n\nthis is no assignment sk-SECRET\n", 4, "not a variable assignment"),
        ("# ok\nB=2\nLONE_KEY\n", 3, "LONE_KEY has no '='; write LONE_KEY="),
        ('C="sk-SECRET\n', 1, "not a variable assignment"),
        ("=sk-SECRET\n", 1, "not a variable assignment"),
    ],
)
def test_a_bad_line_is_one_error_naming_file_and_line_never_its_text(
    cli: CLI, tmp_path: Path, text: str, line: int, says: str
) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text(text)
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    out = tmp_path / "out" / "results.jsonl"
    proc = cli.local(
        data, "--workflow", "tests.workflows:NoopWorkflow", "--env-file", env_file, "-o", out
    )
    assert proc.returncode == 2
    (error,) = error_lines(proc.stderr)
    assert error.startswith(f"error: {env_file}:{line}: ") and says in error
    assert "sk-SECRET" not in proc.stdout + proc.stderr
    assert not out.exists()


def test_an_unreadable_env_file_is_one_error(cli: CLI, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    (tmp_path / "dir.env").mkdir()
    (tmp_path / "latin1.env").write_bytes(b"KEY=\xff\n")
    expected = {
        "missing.env": "env file not found",
        "dir.env": "is a directory; pass the dotenv file",
        "latin1.env": "not UTF-8 text; save the env file as UTF-8",
    }
    for name, says in expected.items():
        env_file = tmp_path / name
        proc = cli.local(data, "--workflow", "tests.workflows:NoopWorkflow", "--env-file", env_file)
        assert proc.returncode == 2
        assert error_lines(proc.stderr) == [f"error: {env_file}: {says}"]


def test_validate_reads_the_env_file_as_a_run_would(cli: CLI, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "http://127.0.0.1:9/v1")
    env = {k: v for k, v in cli_env().items() if k != "OSMO_RUN_TEST_KEY"}
    without = cli("validate", spec, env=env)
    assert without.returncode == 2
    assert "OSMO_RUN_TEST_KEY is not set" in without.stderr
    env_file = tmp_path / ".env"
    env_file.write_text("OSMO_RUN_TEST_KEY=sk-validate-secret\n")
    given = cli("validate", spec, "--env-file", env_file, env=env)
    assert given.returncode == 0, given.stderr
    assert "no problems found" in given.stdout
    assert "sk-validate-secret" not in given.stdout + given.stderr


def test_other_values_of_the_env_file_are_masked_too(cli: CLI, tmp_path: Path) -> None:
    """Not only the model's key: a tool token the workflow reads from the env file and
    quotes in an error shows as *** in the row, the printed line and every file; a short
    value (a port, a flag) is no secret and is left alone."""
    token = f"tok-{secrets.token_hex(12)}"
    env_file = tmp_path / ".env"
    env_file.write_text(f"OSMO_RUN_TEST_TOOL_TOKEN={token}\nOSMO_RUN_TEST_PORT=8080\n")
    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "r1", "prompt": "hi"}\n')
    out = tmp_path / "run" / "results.jsonl"
    workflow = "tests.cli.env_workflows:LeakyToolWorkflow"
    proc = cli.subprocess(
        "local", data, "--workflow", workflow, "--code-dir", REPO, "-o", out,
        "--env-file", env_file, "--summary-md", tmp_path / "run/s.md",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = read_jsonl(out)
    assert row["error_message"].startswith("RuntimeError: tool refused token ***")
    assert token not in proc.stderr
    assert _files_holding(tmp_path / "run", token.encode()) == []


def test_a_multi_line_secret_is_masked_line_by_line_everywhere(cli: CLI, tmp_path: Path) -> None:
    """A PEM key in the env file, quoted by a workflow's error: the row keeps the error's
    first line, which holds only the key's first line; no line of the key reaches the
    printed FAILURE line, the row, the JUnit report or the Markdown summary."""
    lines = [secrets.token_urlsafe(48) for _ in range(3)]
    pem = "\n".join(lines)
    env_file = tmp_path / ".env"
    env_file.write_text(f'OSMO_RUN_TEST_PEM="{pem}"\n')
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"id": "r1", "prompt": "hi", "raise_env": "OSMO_RUN_TEST_PEM"}))
    run = tmp_path / "run"
    proc = cli.subprocess(
        "local", data, "--workflow", "tests.workflows:ScriptedWorkflow", "--code-dir", REPO,
        "-o", run / "results.jsonl", "--env-file", env_file, "--plain",
        "--junit-xml", run / "junit.xml", "--summary-md", run / "summary.md",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = read_jsonl(run / "results.jsonl")
    assert row["error_message"].startswith("RuntimeError: the server refused ***")
    printed = proc.stdout + proc.stderr
    assert "the server refused ***" in printed
    for line in lines:
        assert line not in printed
        assert _files_holding(run, line.encode()) == []
        assert _files_holding(run, json.dumps(line)[1:-1].encode()) == []
