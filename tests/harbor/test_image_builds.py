"""Building a task's Dockerfile before any row: the task's ``build_timeout_sec`` bounds it,
a failing step is named, SIGTERM stops it like Ctrl-C, and no build container outlives
it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harbor.conftest import (
    BASE_IMAGE,
    CALCULATOR_TASK,
    harbor_spec,
    run_harbor,
    start_harbor,
    stop_process,
)

ROWS = [{"id": "built", "prompt": "hi", "label": "42"}]


def _task(tmp_path: Path, run_line: str, build_timeout_sec: float = 300.0) -> tuple[Path, str]:
    """A task building ``FROM base`` + ``run_line`` (made unique, so no cache answers);
    return its directory and the unique tag the build's commands carry."""
    tag = f"osmo-build-{uuid.uuid4().hex[:10]}"
    task = tmp_path / "task"
    shutil.copytree(CALCULATOR_TASK, task)
    toml = (task / "task.toml").read_text()
    toml = toml.replace('docker_image = "osmo-run/bookworm:latest"\n', "")
    toml = toml.replace("build_timeout_sec = 300.0", f"build_timeout_sec = {build_timeout_sec}")
    (task / "task.toml").write_text(toml)
    (task / "environment").mkdir()
    dockerfile = f"FROM {BASE_IMAGE}\nRUN echo {tag} && {run_line}\n"
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task, tag


def _build_containers(tag: str) -> list[str]:
    """Containers (running or stopped) of a build step whose command holds ``tag``."""
    listing = subprocess.run(
        ["docker", "ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Command}}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return [line for line in listing.stdout.splitlines() if tag in line]


def _build_processes(tag_dir: Path) -> list[str]:
    """``docker build`` processes whose context is under ``tag_dir``."""
    listing = subprocess.run(
        ["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True, timeout=30, check=False
    )
    return [
        line for line in listing.stdout.splitlines() if "build" in line and str(tag_dir) in line
    ]


def _wait_gone(probe: Callable[[], list[str]], timeout_sec: float = 60) -> list[str]:
    """Poll ``probe`` until it finds nothing; what it still finds at the timeout."""
    deadline = time.monotonic() + timeout_sec
    while (left := probe()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.docker
@pytest.mark.slow
def test_build_timeout_sec_of_the_task_bounds_its_image_build(tmp_path: Path) -> None:
    task, tag = _task(tmp_path, "sleep 600", build_timeout_sec=15)
    spec = harbor_spec(harbor={"task_dir": str(task)})
    done = run_harbor(tmp_path, ROWS, spec, timeout=250)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.error_lines
    assert line.startswith(f"error: --task-dir {task}: ") and "trial image failed" in line
    assert "longer than 15s" in line and "build_timeout_sec" in line, line
    assert done.wall_sec < 250  # not Docker's 900 s default
    assert _wait_gone(lambda: _build_containers(tag)) == []


@pytest.mark.docker
@pytest.mark.slow
def test_failed_build_names_its_step_and_leaves_no_container(tmp_path: Path) -> None:
    task, tag = _task(tmp_path, "exit 7")
    spec = harbor_spec(harbor={"task_dir": str(task)})
    done = run_harbor(tmp_path, ROWS, spec)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.error_lines
    assert "DEPRECATED" not in line and "legacy builder" not in line, line
    assert "Step 2/" in line and f"RUN echo {tag} && exit 7" in line, line
    assert "returned a non-zero code: 7" in line, line
    assert _build_containers(tag) == []


@pytest.mark.docker
@pytest.mark.slow
def test_sigterm_during_the_image_build_exits_130_and_ends_the_build(tmp_path: Path) -> None:
    task, tag = _task(tmp_path, "sleep 600")
    spec = harbor_spec(harbor={"task_dir": str(task)})
    process, _ = start_harbor(tmp_path, ROWS, spec)
    try:
        deadline = time.monotonic() + 120
        while not [c for c in _build_containers(tag) if "sleep 600" in c]:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the build never started its RUN step"
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        stop_process(process)
    assert process.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0] and "build" in lines[0], stderr
    assert _wait_gone(lambda: _build_processes(task)) == []
    assert _wait_gone(lambda: _build_containers(tag)) == []
