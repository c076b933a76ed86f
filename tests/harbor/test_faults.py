"""Faults during real harbor runs: a trial container killed from outside, and an
``osmo-run`` process killed with SIGKILL, after which ``osmo-run cleanup`` removes every
container, network and trial directory it left."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import OSMO_RUN
from tests.harbor.conftest import (
    harbor_spec,
    labelled_containers,
    run_id_of_containers,
    start_harbor,
    stop_process,
)


def _docker(*args: str) -> str:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=False, timeout=60
    ).stdout


def _wait_for_containers(process: subprocess.Popen[str], fragment: str, count: int) -> str:
    deadline = time.monotonic() + 60
    run_id = None
    while run_id is None or len(labelled_containers(run_id)) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{count} trial containers never came up"
        time.sleep(0.3)
        run_id = run_id or run_id_of_containers(fragment)
    return run_id


def _sleepers(prefix: str, count: int) -> list[dict[str, object]]:
    return [
        {
            "id": f"{prefix}-{i}",
            "prompt": "hi",
            "label": "42",
            "metadata": {"workflow": "sleep", "sleep_sec": 60},
        }
        for i in range(count)
    ]


@pytest.mark.docker
@pytest.mark.slow
def test_a_trial_container_killed_from_outside_is_an_infra_error(tmp_path: Path) -> None:
    rows = [*_sleepers("victim", 1), {"id": "bystander", "prompt": "hi", "label": "42"}]
    # No retries: an infra_error is retried by default, and the retry would succeed.
    spec = harbor_spec(timeouts={"agent_sec": 90, "grader_sec": 10}, retries={"max_attempts": 1})
    process, output = start_harbor(tmp_path, rows, spec)
    try:
        invocation = _wait_for_containers(process, "-victim-0__env", 1)
        deadline = time.monotonic() + 60
        victim: list[str] = []
        while len(victim) != 1 or "osmo_run.sdk.sandbox" not in _docker("top", victim[0]):
            assert time.monotonic() < deadline, "the workflow never started in the trial"
            time.sleep(0.2)
            victim = _docker(
                "ps",
                "-q",
                "--filter",
                f"label=osmo-run.invocation={invocation}",
                "--filter",
                "name=victim-0__env",
            ).split()
        _docker("kill", *victim)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        stop_process(process)
    records = {r["row_id"]: r for r in map(json.loads, output.read_text().splitlines())}
    killed = records["victim-0"]
    assert (killed["status"], killed["error_category"]) == ("failure", "infra_error"), (
        killed["attempts"],
        killed["backend"],
        killed["timings"],
    )
    assert killed["error_phase"] in ("workflow", "setup")
    assert records["bystander"]["status"] == "success"
    assert process.returncode == 1, stdout + stderr


@pytest.mark.docker
@pytest.mark.slow
def test_cleanup_removes_what_a_sigkilled_run_left(tmp_path: Path) -> None:
    spec = harbor_spec(timeouts={"agent_sec": 120, "grader_sec": 10})
    process, output = start_harbor(tmp_path, _sleepers("killed", 2), spec)
    try:
        invocation = _wait_for_containers(process, "-killed-0__env", 2)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=10)  # also closes its pipes
    finally:
        stop_process(process)
    assert len(labelled_containers(invocation)) == 2  # what a kill -9 leaves
    trials = output.parent / "trials"
    assert len(list(trials.iterdir())) == 2
    done = subprocess.run(
        [str(OSMO_RUN), "cleanup", str(output.parent)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "removed 2 containers, 2 networks, 2 trial directories" in done.stdout
    assert labelled_containers(invocation) == []
    assert not _docker(
        "network", "ls", "-q", "--filter", f"label=osmo-run.invocation={invocation}"
    ).split()
    assert list(trials.iterdir()) == []
