"""After ``kill -9`` of ``osmo-run harbor``, its staging copy (the SDK, the user's code
with its ``.env``, the trials' inputs) goes with ``osmo-run cleanup`` or with the
``--resume`` that finishes the run, and the resume keeps none of the killed invocation's
trial directories (issue 28, item 20)."""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import OSMO_RUN
from tests.harbor.conftest import (
    harbor_spec,
    labelled_containers,
    run_harbor,
    run_id_of_containers,
    start_harbor,
    stop_process,
)


def _rows(prefix: str, sleep_sec: float) -> list[dict[str, Any]]:
    metadata = {"workflow": "sleep", "sleep_sec": sleep_sec}
    return [
        {"id": f"{prefix}-{i}", "prompt": "hi", "label": "42", "metadata": metadata}
        for i in range(2)
    ]


def _staging(invocation: str) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"osmo-run-{invocation}-*"))


def _start_and_kill(directory: Path, rows: list[dict[str, Any]], spec: dict[str, Any]) -> str:
    """Start ``osmo-run harbor``, SIGKILL it once its 2 trial containers run; return its
    invocation id."""
    process, _ = start_harbor(directory, rows, spec)
    try:
        deadline = time.monotonic() + 90
        invocation = None
        while invocation is None or len(labelled_containers(invocation)) < 2:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "2 trial containers never came up"
            time.sleep(0.3)
            invocation = invocation or run_id_of_containers(f"-{rows[0]['id']}__env")
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=10)
    finally:
        stop_process(process)
    assert len(_staging(invocation)) == 1  # what a kill -9 leaves
    return invocation


@pytest.mark.docker
@pytest.mark.slow
def test_cleanup_removes_the_staging_copy_a_sigkilled_run_left(tmp_path: Path) -> None:
    spec = harbor_spec(timeouts={"agent_sec": 120, "grader_sec": 10})
    invocation = _start_and_kill(tmp_path, _rows("staged", 60), spec)
    done = subprocess.run(
        [str(OSMO_RUN), "cleanup", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "1 staging copies" in done.stdout
    assert _staging(invocation) == []


@pytest.mark.docker
@pytest.mark.slow
def test_resume_removes_the_killed_invocations_staging_and_trial_dirs(tmp_path: Path) -> None:
    spec = harbor_spec(timeouts={"agent_sec": 120, "grader_sec": 10})
    rows = _rows("resumed", 6)
    killed = _start_and_kill(tmp_path, rows, spec)
    trials = tmp_path / "out" / "trials"
    assert [p for p in trials.iterdir() if p.name.startswith(f"osmo-{killed}-")]
    resumed = run_harbor(tmp_path, rows, spec, "--resume", "--keep-trials", timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert set(resumed.rows) == {"resumed-0", "resumed-1"}
    assert _staging(killed) == []
    assert resumed.run_id is not None and _staging(resumed.run_id) == []
    left = sorted(p.name for p in trials.iterdir() if p.is_dir())
    assert left and all(name.startswith(f"osmo-{resumed.run_id}-") for name in left), left
