"""One live invocation per run directory: a second one is refused naming the first, and
a lock its holder left by dying (SIGKILL, a requeued job) is taken over."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import (
    CLI,
    OSMO_RUN,
    REPO,
    SCRIPTED_GRADED,
    WriteJsonl,
    cli_env,
    error_lines,
    read_jsonl,
)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _start_local(cwd: Path, *args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(OSMO_RUN), "local", *map(str, args), "--code-dir", str(REPO)],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for_lines(proc: subprocess.Popen[str], output: Path, count: int) -> None:
    deadline = time.monotonic() + 60
    while _lines(output) < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the first run never wrote {count} lines: {proc.communicate()[1]}")
        time.sleep(0.05)


def _slow_rows(count: int, sleep: float) -> list[dict[str, object]]:
    return [
        {"id": f"r{i}", "prompt": "hi", "label": "hi", "metadata": {"sleep": sleep}}
        for i in range(count)
    ]


@pytest.mark.parametrize("second", [["--resume"], ["--overwrite"], ["--retry-errors"], []])
def test_second_invocation_of_a_live_run_is_refused_naming_the_first(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, second: list[str]
) -> None:
    data = write_jsonl(_slow_rows(10, 0.5))
    output = tmp_path / "run" / "results.jsonl"
    args = (data, *SCRIPTED_GRADED, "-c", "1", "--display", "plain", "-o", output)
    first = _start_local(tmp_path, *args)
    try:
        _wait_for_lines(first, output, 1)
        done = cli.local(*args, *second)
        assert done.returncode == 2, done.stderr
        (line,) = error_lines(done.stderr)
        assert f"pid {first.pid}" in line and socket.gethostname() in line, line
        assert "results.jsonl" in line
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    before = _lines(output)
    assert before >= 1  # the refusal removed nothing the first run finished
    # the first run died holding the lock (SIGKILL): --resume takes it over and finishes
    done = cli.local(*args, "--resume")
    assert done.returncode == 0, done.stderr
    records = read_jsonl(output)
    ids = Counter(record["row_id"] for record in records)
    assert sorted(ids) == [f"r{i}" for i in range(10)] and set(ids.values()) == {1}


def test_lock_left_with_a_stale_record_is_taken_over(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    """A lock file whose holder is gone (its record names a dead process on another
    host: what a requeued Slurm or Kubernetes job finds) does not stop the run."""
    data = write_jsonl(_slow_rows(3, 0))
    output = tmp_path / "run" / "results.jsonl"
    output.parent.mkdir()
    stale = {"pid": 999999, "host": "gone-node", "started": "2026-01-01T00:00:00+00:00"}
    output.with_name("results.jsonl.lock").write_text(json.dumps(stale))
    done = cli.local(data, *SCRIPTED_GRADED, "--display", "plain", "-o", output)
    assert done.returncode == 0, done.stderr
    assert len(read_jsonl(output)) == 3


def test_regrade_into_a_live_regrade_is_refused(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    rows = [
        {"id": f"r{i}", "prompt": "hi", "label": "hi", "metadata": {"grade": "sleep:6"}}
        for i in range(4)
    ]
    data = write_jsonl(rows)
    output = tmp_path / "run" / "results.jsonl"
    done = cli.local(data, *SCRIPTED_GRADED, "-c", "4", "--display", "plain", "-o", output)
    assert done.returncode == 0, done.stderr
    regraded = tmp_path / "regraded" / "results.jsonl"
    regrade = [str(OSMO_RUN), "regrade", str(output), "-o", str(regraded)]
    first = subprocess.Popen(
        regrade, cwd=tmp_path, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while not regraded.with_name("results.manifest.json").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        second = cli("regrade", output, "-o", regraded, "--overwrite")
        assert second.returncode == 2, second.stderr
        (line,) = error_lines(second.stderr)
        assert f"pid {first.pid}" in line
    finally:
        first.kill()
        first.communicate(timeout=30)


def test_a_file_at_the_lock_path_is_never_overwritten(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    """The dataset itself sits where the lock goes (``--output`` aliasing it): refused,
    the dataset intact."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    data = write_jsonl(_slow_rows(2, 0), name="run/results.jsonl.lock")
    before = data.read_bytes()
    done = cli.local(data, *SCRIPTED_GRADED, "--display", "plain", "-o", run_dir / "results.jsonl")
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = error_lines(done.stderr)
    assert "is not an osmo-run lock file" in line and "--output" in line, line
    assert data.read_bytes() == before


def test_a_symlink_at_the_lock_path_is_not_followed(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl(_slow_rows(2, 0))
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.jsonl.lock").symlink_to(precious)
    done = cli.local(data, *SCRIPTED_GRADED, "--display", "plain", "-o", run_dir / "results.jsonl")
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = error_lines(done.stderr)
    assert "lock file" in line, line
    assert precious.read_text() == "keep me"


def test_results_named_like_a_lock_file_resume_safely(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    """``--output x.lock``: the lock is ``x.lock.lock``, never the results file."""
    data = write_jsonl(_slow_rows(3, 0))
    output = tmp_path / "x.lock"
    assert cli.local(data, *SCRIPTED_GRADED, "--display", "plain", "-o", output).returncode == 0
    done = cli.local(data, *SCRIPTED_GRADED, "--display", "plain", "-o", output, "--resume")
    assert done.returncode == 0, done.stderr
    assert sorted(r["row_id"] for r in read_jsonl(output)) == ["r0", "r1", "r2"]
