"""The browser gate itself: without Chromium, browser tests skip with the provisioning
hint, and fail instead when ``OSMO_RUN_REQUIRE_BROWSER=1`` (CI). The nested pytest points
``OSMO_RUN_CHROMIUM`` at a browser that does not exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

HERE = Path(__file__).resolve().parent


def run_gated_test(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "OSMO_RUN_REQUIRE_BROWSER"}
    environ.update(OSMO_RUN_CHROMIUM=str(tmp_path / "no-chromium"), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(HERE / "browser_smoke.py"), "-q", "-rs",
         "-p", "no:cacheprovider"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip


@pytest.mark.parametrize("required", ["", "0"])
def test_browser_tests_skip_without_chromium(tmp_path: Path, required: str) -> None:
    done = run_gated_test(tmp_path, OSMO_RUN_REQUIRE_BROWSER=required)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert "no Chromium: run sudo scripts/provision-browser.sh" in done.stdout


def test_browser_tests_fail_without_chromium_when_required(tmp_path: Path) -> None:
    done = run_gated_test(tmp_path, OSMO_RUN_REQUIRE_BROWSER="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 error" in done.stdout
    assert "OSMO_RUN_REQUIRE_BROWSER=1 but no Chromium" in done.stdout


def test_the_smoke_test_passes_with_chromium(browser: object) -> None:
    """With the browser here, the same file passes (so the gate is not all it tests)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(HERE / "browser_smoke.py"), "-q",
         "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
