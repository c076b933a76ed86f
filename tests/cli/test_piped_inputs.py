"""Inputs given as pipes (``--env-file <(sops -d .env)``, ``osmo-run local <(zcat ...)``) and
endless devices: each is read once and masked, refused in one line, or bounded."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import OSMO_RUN, REPO, cli_env, error_lines, read_jsonl

TOKEN = "piped-secret-token-4242"


def _run_with_pipe(cwd: Path, text: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """``osmo-run ARGS`` with ``{pipe}`` in ARGS standing for ``/dev/fd/N``, a pipe holding
    ``text``, as bash's process substitution passes it."""
    read_end, write_end = os.pipe()
    os.write(write_end, text.encode())
    os.close(write_end)
    try:
        return subprocess.run(
            [str(OSMO_RUN), *(a.replace("{pipe}", f"/dev/fd/{read_end}") for a in args)],
            cwd=cwd,
            env=cli_env(),
            pass_fds=(read_end,),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(read_end)


def test_an_env_file_from_a_pipe_sets_its_variables_and_masks_them(
    tmp_path: Path, write_jsonl
) -> None:
    data = write_jsonl([{"id": "a", "prompt": "hi"}, {"id": "b", "prompt": "hi"}])
    result = _run_with_pipe(
        tmp_path,
        f"OSMO_RUN_TEST_TOOL_TOKEN={TOKEN}\n",
        [
            "local",
            str(data),
            "--code-dir",
            str(REPO),
            "--workflow",
            "tests.cli.env_workflows:LeakyToolWorkflow",
            "--env-file",
            "{pipe}",
            "--output",
            "run/results.jsonl",
            "--display",
            "plain",
        ],
    )
    assert result.returncode == 1, result.stderr
    rows = read_jsonl(tmp_path / "run" / "results.jsonl")
    messages = [row["error_message"] for row in rows]
    assert all(m.startswith("RuntimeError: tool refused token *** (at ") for m in messages)
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert TOKEN not in path.read_text(encoding="utf-8", errors="replace"), path
    assert TOKEN not in result.stderr.replace(f"calling the tool with {TOKEN}", "")


def test_a_dataset_from_a_pipe_is_refused_in_one_line(tmp_path: Path) -> None:
    # It was read once to count and check its rows and found empty when run: "0/1 done",
    # exit 0, an empty results file.
    result = _run_with_pipe(
        tmp_path,
        '{"id": "a", "prompt": "hi"}\n',
        [
            "local",
            "{pipe}",
            "--code-dir",
            str(REPO),
            "--workflow",
            "tests.workflows:EchoWorkflow",
            "--output",
            "run/results.jsonl",
        ],
    )
    assert result.returncode == 2
    (line,) = error_lines(result.stderr)
    assert line.endswith(
        "not a regular file (a pipe or a device); osmo-run reads a dataset more than once, "
        "so write it to a file first (cmd > rows.jsonl)"
    )


def test_a_spec_from_a_pipe_is_read(tmp_path: Path, write_jsonl) -> None:
    data = write_jsonl([{"id": "a", "prompt": "hi"}])
    result = _run_with_pipe(
        tmp_path,
        f"workflow: tests.workflows:EchoWorkflow\ncode_dir: {REPO}\n",
        ["local", str(data), "--spec", "{pipe}", "--output", "run/results.jsonl"],
    )
    assert result.returncode == 0, result.stderr
    assert [row["status"] for row in read_jsonl(tmp_path / "run" / "results.jsonl")] == ["success"]


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--spec", "error: /dev/zero: larger than 1 MiB; pass the YAML spec"),
        (
            "--env-file",
            "error: /dev/zero: larger than 1 MiB; an env file holds variables, "
            "pass the dotenv file",
        ),
    ],
)
def test_an_endless_spec_or_env_file_is_refused(cli, write_jsonl, flag: str, expected: str) -> None:
    data = write_jsonl([{"id": "a", "prompt": "hi"}])
    result = cli.subprocess(
        "local",
        data,
        "--workflow",
        "tests.workflows:EchoWorkflow",
        "--code-dir",
        REPO,
        flag,
        "/dev/zero",
        timeout=60,
    )
    assert result.returncode == 2
    assert error_lines(result.stderr) == [expected]
