"""Ctrl-C (and SIGTERM) on a real ``osmo-run local`` process: exit 130, output kept valid."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from osmo_run.run.writing.records import OutputRecord
from tests.conftest import OSMO_RUN, REPO, WriteJsonl, cli_env


class Run:
    """A background ``osmo-run local`` whose stdout lines are collected as they come."""

    def __init__(self, cwd: Path, *args: str | Path) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [str(OSMO_RUN), "local", *map(str, args), "--code-dir", str(REPO)],
            cwd=cwd,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(list(self.lines)):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.proc.kill()
                pytest.fail(f"osmo-run did not get there; stdout so far: {self.lines}")
            time.sleep(0.02)

    def finish(self, timeout: float) -> tuple[int, str, str]:
        try:
            code = self.proc.wait(timeout)
        finally:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        assert self.proc.stderr is not None
        stderr = self.proc.stderr.read()
        self.proc.stderr.close()
        self.proc.stdout.close()  # type: ignore[union-attr]
        return code, "\n".join(self.lines), stderr


def _started(count: int) -> Callable[[list[str]], bool]:
    return lambda lines: sum(line.startswith("started ") for line in lines) >= count


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_exits_130_recording_rows_in_flight_as_cancelled(
    tmp_path: Path, write_jsonl: WriteJsonl, sig: signal.Signals
) -> None:
    data = write_jsonl([{"id": f"slow-{i}", "prompt": "x"} for i in range(6)])
    output = tmp_path / "out.jsonl"
    run = Run(
        tmp_path,
        data,
        "--workflow",
        "tests.workflows:SlowWorkflow",
        "-c",
        "2",
        "--display",
        "plain",
        "-o",
        output,
    )
    run.wait_for(_started(2))
    assert run.lines[0].startswith(f"osmo-run local {data} · 6 rows · concurrency 2")
    sent = time.monotonic()
    run.proc.send_signal(sig)
    code, stdout, stderr = run.finish(timeout=10)
    assert code == 130, stderr
    assert time.monotonic() - sent < 4
    assert "Traceback" not in stderr
    assert "Interrupted: cancelling rows in flight" in stdout
    assert "Run summary (interrupted)" in stdout
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    ids = [line["row_id"] for line in lines]
    assert sorted(ids) == ["slow-0", "slow-1"]
    for line in lines:
        record = OutputRecord.model_validate(line)
        assert (record.status, record.error_category) == ("cancelled", "cancelled")
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["by_status"] == {"cancelled": 2}


def test_rows_ignoring_cancellation_do_not_keep_an_interrupted_run_alive(
    tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    """StubbornWorkflow swallows every cancellation for 30 s; the run still ends."""
    data = write_jsonl([{"id": f"stubborn-{i}", "prompt": "x"} for i in range(4)])
    output = tmp_path / "out.jsonl"
    run = Run(
        tmp_path,
        data,
        "--workflow",
        "tests.workflows:StubbornWorkflow",
        "-c",
        "2",
        "--display",
        "plain",
        "-o",
        output,
    )
    run.wait_for(_started(2))
    sent = time.monotonic()
    run.proc.send_signal(signal.SIGINT)
    code, stdout, stderr = run.finish(timeout=10)
    assert code == 130, stderr
    assert time.monotonic() - sent < 4
    assert "Run summary (interrupted)" in stdout
    statuses = [json.loads(line)["status"] for line in output.read_text().splitlines()]
    assert statuses == ["cancelled", "cancelled"]


def test_second_interrupt_exits_at_once_even_while_a_workflow_blocks_the_loop(
    tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    """The first Ctrl-C's cancellation runs into 5 s of blocking clean-up; the second one
    must not wait for it."""
    data = write_jsonl([{"id": f"blocking-{i}", "prompt": "x"} for i in range(4)])
    output = tmp_path / "out.jsonl"
    run = Run(
        tmp_path,
        data,
        "--workflow",
        "tests.workflows:BlockingCleanupWorkflow",
        "-c",
        "2",
        "--display",
        "plain",
        "-o",
        output,
    )
    run.wait_for(_started(2))
    run.proc.send_signal(signal.SIGINT)
    run.wait_for(lambda lines: any(line.startswith("Interrupted") for line in lines), timeout=5)
    time.sleep(0.5)
    sent = time.monotonic()
    run.proc.send_signal(signal.SIGINT)
    code, _, stderr = run.finish(timeout=10)
    assert code == 130, stderr
    assert time.monotonic() - sent < 1.5
    assert "Traceback" not in stderr
    for line in output.read_text().splitlines():
        OutputRecord.model_validate_json(line)
