"""Ctrl-C during a real ``osmo-run harbor`` run: exit 130, every row recorded as cancelled,
no container left behind."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.harbor.conftest import (
    harbor_spec,
    labelled_containers,
    run_id_of_containers,
    start_harbor,
    stop_process,
    wait_for_no_labelled_containers,
)


@pytest.mark.docker
@pytest.mark.slow
def test_ctrl_c_cancels_running_trials_and_removes_their_containers(tmp_path: Path) -> None:
    rows = [
        {
            "id": f"ctrl-c-{i}",
            "prompt": "hi",
            "label": "42",
            "metadata": {"workflow": "sleep", "sleep_sec": 60},
        }
        for i in range(3)
    ]
    spec = harbor_spec(timeouts={"agent_sec": 120, "grader_sec": 10})
    process, output = start_harbor(tmp_path, rows, spec)
    run_id = None
    try:
        deadline = time.monotonic() + 60
        # this run's containers (other runs may share the engine): trial names end in the row id
        while run_id is None or len(labelled_containers(run_id)) < 3:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "3 trial containers never came up"
            time.sleep(0.3)
            run_id = run_id or run_id_of_containers("-ctrl-c-0__env")
        time.sleep(1.0)  # let the workflows start their sleep
        interrupted = time.monotonic()
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
        took = time.monotonic() - interrupted
    finally:
        stop_process(process)
    assert process.returncode == 130, stdout + stderr
    assert took < 60
    assert "Interrupted" in stdout
    assert "Traceback" not in stdout + stderr
    rows_out = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted(row["row_id"] for row in rows_out) == ["ctrl-c-0", "ctrl-c-1", "ctrl-c-2"]
    assert {(row["status"], row["error_category"]) for row in rows_out} == {
        ("cancelled", "cancelled")
    }
    summary = json.loads(output.with_name("results.summary.json").read_text())
    assert summary["interrupted"] is True
    assert wait_for_no_labelled_containers(run_id, timeout_sec=10) == []
