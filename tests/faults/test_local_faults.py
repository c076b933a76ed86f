"""Faults mid-run with the local backend: the run goes on, the row gets the right category
and a useful message, the output stays valid and the summary counts it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import OSMO_RUN, REPO, jsonl_bytes

WORKFLOW = [
    "--workflow",
    "tests.faults.fault_workflows:MisbehavingWorkflow",
    "--code-dir",
    str(REPO),
]


def _run(
    tmp_path: Path, rows: list[dict[str, object]], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    data = tmp_path / "data.jsonl"
    data.write_bytes(jsonl_bytes(rows))
    return subprocess.run(
        [str(OSMO_RUN), "local", str(data), *WORKFLOW, "--display", "plain", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )


def _records(path: Path) -> dict[str, dict[str, object]]:
    return {r["row_id"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_process_isolation_kills_a_row_that_blocks_the_loop_forever(tmp_path: Path) -> None:
    """In process isolation a row stuck in synchronous code is killed at its deadline
    (plus a 2 s margin), recorded as a timeout, and the other rows are unaffected."""
    rows = [
        {"id": "ok", "prompt": "x"},
        {"id": "stuck", "prompt": "x", "metadata": {"do": "block"}},
    ]
    started = time.monotonic()
    proc = _run(
        tmp_path, rows, "--isolation", "process", "--agent-timeout", "1.5", "-o", "out.jsonl"
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    records = _records(tmp_path / "out.jsonl")
    assert records["ok"]["status"] == "success", records["ok"]
    stuck = records["stuck"]
    assert (stuck["error_category"], stuck["error_phase"]) == ("timeout", "workflow")
    assert "its process was killed" in str(stuck["error_message"])
    assert elapsed < 15


def test_process_isolation_reports_a_process_that_dies_without_a_result(tmp_path: Path) -> None:
    rows = [{"id": "dies", "prompt": "x", "metadata": {"do": "exit"}}]
    proc = _run(tmp_path, rows, "--isolation", "process", "-o", "out.jsonl")
    assert proc.returncode == 1, proc.stderr
    dies = _records(tmp_path / "out.jsonl")["dies"]
    assert (dies["error_category"], dies["error_phase"]) == ("agent_error", "workflow")
    assert str(dies["error_message"]).startswith(
        "the workflow exited with code 3 without returning"
    )


def test_process_isolation_grades_and_kills_a_blocking_grader(tmp_path: Path) -> None:
    rows = [
        {"id": "graded", "prompt": "x", "label": "fine"},
        {"id": "stuck-grader", "prompt": "x", "label": "block"},
    ]
    proc = _run(
        tmp_path,
        rows,
        "--grader",
        "tests.faults.fault_workflows:BlockingGrader",
        "--isolation",
        "process",
        "--grader-timeout",
        "1",
        "-o",
        "out.jsonl",
    )
    assert proc.returncode == 1, proc.stderr
    records = _records(tmp_path / "out.jsonl")
    assert (records["graded"]["status"], records["graded"]["reward"]) == ("success", 1.0)
    stuck = records["stuck-grader"]
    assert (stuck["error_category"], stuck["error_phase"]) == ("timeout", "grader")
    assert stuck["sample"]["messages"] == [{"role": "assistant", "content": "ok"}]


def test_process_isolation_hands_the_api_key_to_the_child_and_never_writes_it(
    tmp_path: Path,
) -> None:
    secret = "sk-isolated-SECRET-4242"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workflow: tests.faults.fault_workflows:MisbehavingWorkflow\n"
        f"code_dir: {REPO}\n"
        "llm: {base_url: 'http://model.invalid/v1', model: m, api_key_env: FAULT_TEST_KEY}\n"
    )
    data = tmp_path / "data.jsonl"
    data.write_bytes(jsonl_bytes([{"id": "k", "prompt": "x", "metadata": {"do": "key"}}]))
    proc = subprocess.run(
        [
            str(OSMO_RUN),
            "local",
            str(data),
            "-s",
            str(spec),
            "--isolation",
            "process",
            "-o",
            "out.jsonl",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "FAULT_TEST_KEY": secret},
    )
    assert proc.returncode == 0, proc.stderr
    record = _records(tmp_path / "out.jsonl")["k"]
    assert record["sample"]["messages"][-1]["content"] == f"key length {len(secret)}"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert secret not in proc.stdout + proc.stderr


def test_a_50_mb_sample_is_written_whole_and_the_run_goes_on(tmp_path: Path) -> None:
    rows = [{"id": "big", "prompt": "x", "metadata": {"do": "big"}}, {"id": "small", "prompt": "x"}]
    proc = _run(tmp_path, rows, "-o", "out.jsonl")
    assert proc.returncode == 0, proc.stderr
    records = _records(tmp_path / "out.jsonl")
    assert len(records["big"]["sample"]["messages"][0]["content"]) == 50 * 1024 * 1024
    assert records["small"]["status"] == "success"


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Path:
    """A 256 KiB tmpfs: the disk that fills up mid-run (needs root, as in CI)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)]).returncode:
        pytest.skip("this machine cannot mount a tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_one_clear_error_and_the_file_stays_valid(
    tmp_path: Path, tiny_disk: Path
) -> None:
    rows = [
        {"id": f"r{i:03d}", "prompt": "y" * 20_000, "metadata": {"do": "echo"}} for i in range(40)
    ]
    output = tiny_disk / "out.jsonl"
    proc = _run(tmp_path, rows, "-c", "1", "-o", str(output))
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    raw = output.read_bytes()
    assert raw.endswith(b"\n")
    lines = [json.loads(line) for line in raw.decode().splitlines()]
    assert 0 < len(lines) < 40
    assert len({line["row_id"] for line in lines}) == len(lines)


def test_a_10_mb_line_is_read_and_run_like_any_other(tmp_path: Path) -> None:
    """A long line is valid input: it is parsed, run and written back whole."""
    prompt = "z" * (10 * 1024 * 1024)
    rows = [
        {"id": "huge", "prompt": prompt, "metadata": {"do": "echo"}},
        {"id": "tiny", "prompt": "x"},
    ]
    proc = _run(tmp_path, rows, "-o", "out.jsonl")
    assert proc.returncode == 0, proc.stderr
    records = _records(tmp_path / "out.jsonl")
    assert records["huge"]["sample"]["messages"][0]["content"] == prompt
    assert records["tiny"]["status"] == "success"
