"""The container engine stops in the middle of a harbor run: the rows in flight fail as
infrastructure errors (never agent errors), the run ends instead of hanging, and once
the engine is back `osmo-run cleanup` leaves no container of the run behind."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import OSMO_RUN, REPO
from tests.harbor.conftest import (
    harbor_spec,
    labelled_containers,
    run_id_of_containers,
    start_harbor,
    stop_process,
)

STATE = Path(os.environ.get("OSMO_RUN_DOCKER_STATE", "/var/lib/osmo-run-docker"))


def _engine_is_ours() -> bool:
    """Only an engine scripts/provision-docker.sh started may be stopped by a test."""
    return (STATE / "dockerd.pid").is_file()


@pytest.mark.docker
@pytest.mark.slow
def test_engine_stopped_mid_run_fails_rows_as_infra_errors_and_cleanup_removes_leftovers(
    tmp_path: Path,
) -> None:
    if not _engine_is_ours():
        if os.environ.get("OSMO_RUN_REQUIRE_DOCKER") == "1":
            pytest.fail("CI must run with the engine scripts/provision-docker.sh started")
        pytest.skip("the engine was not started by scripts/provision-docker.sh; not stopping it")
    # Row ids unique to this test run: the containers are found by their trial names, and
    # another checkout's run of this test may share the engine.
    tag = uuid.uuid4().hex[:8]
    rows = [
        {
            "id": f"lost-{tag}-{i}",
            "prompt": "hi",
            "label": "42",
            "metadata": {"workflow": "sleep", "sleep_sec": 30},
        }
        for i in range(2)
    ]
    spec = harbor_spec(timeouts={"agent_sec": 90, "grader_sec": 10}, retries={"max_attempts": 1})
    process, output = start_harbor(tmp_path, rows, spec)
    try:
        deadline = time.monotonic() + 60
        invocation = None
        while invocation is None or len(labelled_containers(invocation)) < 2:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the trial containers never came up"
            time.sleep(0.3)
            invocation = invocation or run_id_of_containers(f"-lost-{tag}-0__env")
        time.sleep(2.0)  # the workflows are running
        subprocess.run([str(REPO / "scripts" / "stop-docker.sh")], check=True, timeout=90)
        stopped = time.monotonic()
        stdout, stderr = process.communicate(timeout=120)
        took = time.monotonic() - stopped
    finally:
        stop_process(process)
        subprocess.run(
            [str(REPO / "scripts" / "provision-docker.sh"), "--no-image"], check=True, timeout=180
        )
    assert process.returncode == 1, stdout + stderr
    assert took < 120
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted(r["row_id"] for r in records) == [f"lost-{tag}-0", f"lost-{tag}-1"]
    assert {(r["status"], r["error_category"]) for r in records} == {("failure", "infra_error")}
    assert "osmo-run cleanup" in stderr
    done = subprocess.run(
        [str(OSMO_RUN), "cleanup", str(output.parent)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert labelled_containers(invocation) == []
