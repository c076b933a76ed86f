"""A task Harbor would reject, or whose image cannot run the workflow, is refused before
any row: ``validate`` names the problem, and a run stops with one ``error:`` line and exit
2, instead of every row failing as ``infra_error`` until the breaker trips."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.harbor.conftest import (
    BASE_IMAGE,
    CALCULATOR_TASK,
    OSMO_RUN,
    cli_env,
    harbor_spec,
    run_harbor,
    write_inputs,
)

ROWS = [{"id": f"r{i}", "prompt": "hi", "label": "42"} for i in range(6)]


def _task(tmp_path: Path, name: str) -> Path:
    task = tmp_path / name
    shutil.copytree(CALCULATOR_TASK, task)
    return task


def _no_tests(tmp_path: Path) -> tuple[Path, str]:
    task = _task(tmp_path, "no-tests")
    shutil.rmtree(task / "tests")
    return task, "tests/test.sh"


def _soon(tmp_path: Path) -> tuple[Path, str]:
    task = _task(tmp_path, "soon")
    toml = (task / "task.toml").read_text().replace("timeout_sec = 120.0", 'timeout_sec = "soon"')
    (task / "task.toml").write_text(toml)
    return task, "[agent] timeout_sec"


def _negative_build(tmp_path: Path) -> tuple[Path, str]:
    task = _task(tmp_path, "negative")
    toml = (task / "task.toml").read_text() + '\n[verifier.env]\nX = ["not", "a", "string"]\n'
    (task / "task.toml").write_text(toml)
    return task, "[verifier.env] X"


def _no_python(tmp_path: Path) -> tuple[Path, str]:
    """A task whose image has no python3 (built from the base image without it)."""
    task = _task(tmp_path, "no-python")
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(toml.replace('docker_image = "osmo-run/bookworm:latest"\n', ""))
    (task / "environment").mkdir()
    unique = uuid.uuid4().hex[:8]  # a fresh image id, never answered from the probe's cache
    (task / "environment" / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nRUN echo {unique} && rm -f /usr/bin/python3*\n"
    )
    return task, "python3"


BROKEN = {
    "no-tests": _no_tests,
    "soon": _soon,
    "env-list": _negative_build,
    "no-python": _no_python,
}


def _validate(tmp_path: Path, task: Path) -> subprocess.CompletedProcess[str]:
    spec = harbor_spec(harbor={"task_dir": str(task)}, requirements="none")
    _, spec_file = write_inputs(tmp_path / "validate", None, spec)  # --spec SPEC
    return subprocess.run(
        [str(OSMO_RUN), "validate", spec_file, "--harbor"],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_validate_names_what_harbor_or_the_image_would_refuse(tmp_path: Path, broken: str) -> None:
    task, names = BROKEN[broken](tmp_path)
    done = _validate(tmp_path, task)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no problems found" not in done.stdout
    problems = [line for line in done.stderr.splitlines() if line.startswith("problem: ")]
    assert any(names in line for line in problems), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_run_of_a_task_that_cannot_work_stops_before_any_row(tmp_path: Path, broken: str) -> None:
    task, names = BROKEN[broken](tmp_path)
    spec = harbor_spec(harbor={"task_dir": str(task)}, requirements="none")
    done = run_harbor(tmp_path, ROWS, spec)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.error_lines
    assert line.startswith("error: ") and names in line and str(task) in line, line
    assert "Traceback" not in done.stderr
    assert done.rows == {}
