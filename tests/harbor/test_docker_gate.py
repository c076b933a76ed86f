"""The Docker gate itself: without an engine, Docker tests skip with the provisioning hint,
and fail instead when ``OSMO_RUN_REQUIRE_DOCKER=1`` (CI). No engine is needed: the nested
pytest points the docker client at a socket that does not exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harbor.conftest import HERE, REPO


def run_gated_test(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a Docker-marked test file in a nested pytest that sees no Docker engine."""
    environ = {k: v for k, v in os.environ.items() if k != "OSMO_RUN_REQUIRE_DOCKER"}
    environ.update(DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock", **env)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(HERE / "test_interrupt.py"),
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("required", ["", "0"])
def test_docker_tests_skip_without_an_engine(tmp_path: Path, required: str) -> None:
    done = run_gated_test(tmp_path, OSMO_RUN_REQUIRE_DOCKER=required)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert "no Docker engine: run sudo scripts/provision-docker.sh" in done.stdout


def test_docker_tests_fail_without_an_engine_when_docker_is_required(tmp_path: Path) -> None:
    done = run_gated_test(tmp_path, OSMO_RUN_REQUIRE_DOCKER="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 error" in done.stdout
    assert "OSMO_RUN_REQUIRE_DOCKER=1 but no Docker engine" in done.stdout
