"""A live harbor run is one invocation: a second ``--resume`` of it is refused, ``cleanup``
leaves its containers alone, and another run of the same spec into another directory
(the same run id) does not sweep them away."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.harbor.conftest import (
    OSMO_RUN,
    cli_env,
    harbor_spec,
    labelled_containers,
    run_harbor,
    run_id_of_containers,
    start_harbor,
    stop_process,
    wait_for_no_labelled_containers,
)


def _wait_for_containers(process: subprocess.Popen[str], fragment: str, count: int) -> str:
    """The invocation label of the trials whose names hold ``fragment``, once ``count``
    of them are up."""
    deadline = time.monotonic() + 120
    invocation = None
    while invocation is None or len(labelled_containers(invocation)) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{count} trial containers never came up"
        time.sleep(0.3)
        invocation = invocation or run_id_of_containers(fragment)
    return invocation


@pytest.mark.docker
@pytest.mark.slow
def test_live_harbor_run_is_neither_run_twice_nor_cleaned_up(tmp_path: Path) -> None:
    tag = f"held{uuid.uuid4().hex[:6]}"  # names no other run's containers share
    rows = [
        {"id": f"{tag}-{i}", "prompt": "hi", "label": "42",
         "metadata": {"workflow": "sleep", "sleep_sec": 90}}
        for i in range(2)
    ]  # fmt: skip
    spec = harbor_spec(timeouts={"agent_sec": 120, "grader_sec": 10})
    first, output = start_harbor(tmp_path, rows, spec)
    other = None
    try:
        invocation = _wait_for_containers(first, f"-{tag}-0__env", 2)

        second = run_harbor(tmp_path, rows, spec, "--resume")
        assert second.returncode == 2, second.stdout + second.stderr
        (line,) = [x for x in second.error_lines if x.startswith("error:")]
        assert f"pid {first.pid} on {socket.gethostname()}" in line, line
        assert "Traceback" not in second.stderr

        cleanup = subprocess.run(
            [str(OSMO_RUN), "cleanup", str(output.parent)],
            env=cli_env(), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert cleanup.returncode == 2, cleanup.stdout + cleanup.stderr
        assert f"pid {first.pid}" in cleanup.stderr
        assert first.poll() is None, first.communicate()
        assert len(labelled_containers(invocation)) == 2, "a live run's containers went"

        # the same spec and data into another directory: the same run id, another run
        other_dir = tmp_path / "other"
        other, _ = start_harbor(other_dir, rows, spec)
        deadline = time.monotonic() + 120
        while len(_containers_named(tag)) < 4:
            assert other.poll() is None, other.communicate()
            assert time.monotonic() < deadline, "the other run's trials never came up"
            time.sleep(0.3)
        assert len(labelled_containers(invocation)) == 2, "another run swept a live run"
        assert first.poll() is None
    finally:
        for process in (other, first):
            if process is not None:
                process.send_signal(signal.SIGINT)  # each removes its own containers
                try:
                    process.communicate(timeout=90)
                finally:
                    stop_process(process)
    assert first.returncode == 130
    assert wait_for_no_labelled_containers(invocation, 30) == []


def _containers_named(tag: str) -> list[str]:
    """Every running container whose trial is one of this test's rows (``tag`` in its
    name), of any run."""
    listing = subprocess.run(
        ["docker", "ps", "--format", "{{.Names}}"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return [name for name in listing.stdout.split() if f"-{tag}-" in name]
