"""Fixtures for the viewer's tests: real runs made with ``osmo-run local``, the real
``osmo-run view`` server in a subprocess, and real headless Chromium (Debian's package)
driven by Playwright.

Browser tests use the ``browser`` fixture. Without Chromium they are skipped, unless
``OSMO_RUN_REQUIRE_BROWSER=1`` (CI), where they fail instead. ``OSMO_RUN_CHROMIUM`` names
the browser (default ``/usr/bin/chromium``; ``sudo scripts/provision-browser.sh`` installs it).

Screenshots of every page go to ``$OSMO_RUN_TEST_ARTIFACTS/view`` (default
``test-artifacts/view`` in the repository, git-ignored); with
``OSMO_RUN_UPDATE_SCREENSHOTS=1`` the README's copies in ``docs/screenshots`` are
rewritten too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import OSMO_RUN, REPO, cli_env

CHROMIUM = Path(os.environ.get("OSMO_RUN_CHROMIUM", "/usr/bin/chromium"))
NO_BROWSER = "no Chromium: run sudo scripts/provision-browser.sh"
WORKFLOW = "tests.view.view_workflows:TranscriptWorkflow"
GRADER = "tests.view.view_workflows:RewardGrader"
ARTIFACTS = Path(os.environ.get("OSMO_RUN_TEST_ARTIFACTS", REPO / "test-artifacts")) / "view"
SCREENSHOTS = REPO / "docs" / "screenshots"
MARKUP = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def dataset_rows() -> list[dict[str, Any]]:
    """Twelve successes (rewards 1, 0.5, 0), a markup payload, and three failures."""
    rows: list[dict[str, Any]] = [
        {
            "id": f"ok-{i:02d}",
            "system_prompt": "You are a calculator.",
            "user_prompt": f"What is {i}+2?",
            "label": str(i + 2),
            "metadata": {"reward": [1.0, 0.5, 0.0][i % 3], "artifacts": i == 0},
        }
        for i in range(12)
    ]
    rows[1]["metadata"].update(
        say="The answer is **3**.\n\n```\n1 + 2 = 3\n```\n\n[docs](javascript:alert(1))",
        reasoning="First I add 1 and 2.",
        long_tool=40,
    )
    rows += [
        {
            "id": "markup",
            "user_prompt": "Say <b>bold</b>",
            "label": "x",
            "metadata": {"say": MARKUP},
        },
        {
            "id": "bad-value",
            "user_prompt": "fail",
            "label": "x",
            "metadata": {"fail": "ValueError", "message": "bad <i>input</i>"},
        },
        {"id": "boom", "user_prompt": "fail", "label": "x", "metadata": {"fail": "RuntimeError"}},
        {
            "id": "limited",
            "user_prompt": "fail",
            "label": "x",
            "metadata": {"fail": "RateLimitError"},
        },
    ]
    return rows


def write_spec(
    path: Path, workflow_settings: dict[str, Any], grader_settings: dict[str, Any]
) -> Path:
    spec = {
        "workflow": WORKFLOW,
        "grader": GRADER,
        "code_dir": str(REPO),
        "workflow_config": {"settings": workflow_settings},
        "grader_config": {"settings": grader_settings},
        "retries": {"initial_backoff_sec": 0.01, "max_backoff_sec": 0.02, "jitter": 0.0},
    }
    path.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
    return path


def osmo_run(
    *args: str | Path, cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(OSMO_RUN), *map(str, args)],
        cwd=cwd,
        env=cli_env(OSMO_RUN_CACHE_DIR=str(cwd / "cache")),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class Runs:
    """Two real runs of one dataset under ``folder``: ``a``, and ``b`` where ``ok-02`` now
    passes (reward 1) and ``ok-03`` now fails."""

    folder: Path
    a: Path
    b: Path
    dataset: Path


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("view-runs")
    dataset = base / "calc.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in dataset_rows()), encoding="utf-8")
    folder = base / "runs"
    made = []
    for name, workflow_settings, grader_settings in (
        ("a", {}, {}),
        ("b", {"fail": ["ok-03"]}, {"rewards": {"ok-02": 1.0}}),
    ):
        spec = write_spec(base / f"{name}.yaml", workflow_settings, grader_settings)
        out = folder / name / "results.jsonl"
        done = osmo_run("local", dataset, "--spec", spec, "--output", out, "--plain", cwd=base)
        assert done.returncode == 1, done.stdout + done.stderr  # some rows fail on purpose
        made.append(out.parent)
    return Runs(folder, made[0], made[1], dataset)


class Viewer:
    """A running ``osmo-run view`` subprocess and its URL."""

    def __init__(self, proc: subprocess.Popen[str], url: str, stderr: Path) -> None:
        self.proc = proc
        self.url = url.rstrip("/")
        self.stderr = stderr

    def stop(self) -> None:
        """Ctrl-C, as a person stops it; it must exit cleanly and log no error."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        logged = self.stderr.read_text(encoding="utf-8")
        assert "Traceback" not in logged and "ERROR" not in logged, logged


def start_viewer(*paths: Path, cwd: Path, extra: tuple[str, ...] = ()) -> Viewer:
    """Start ``osmo-run view PATHS --no-browser --port 0`` and wait for its URL."""
    stderr = cwd / f"view-{time.monotonic_ns()}.stderr"
    with open(stderr, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(
            [str(OSMO_RUN), "view", *map(str, paths), "--no-browser", "--port", "0", *extra],
            cwd=cwd,
            env=cli_env(OSMO_RUN_CACHE_DIR=str(cwd / "view-cache")),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the server prints its URL (or exits)
    if "http://" not in line:
        proc.kill()
        proc.wait(timeout=15)
        proc.stdout.close()
        raise AssertionError(f"osmo-run view did not start: {line!r} {stderr.read_text()}")
    url = line[line.index("http://") :].split()[0]
    return Viewer(proc, url, stderr)


@pytest.fixture
def viewer(runs: Runs, tmp_path: Path) -> Iterator[Viewer]:
    """``osmo-run view`` over the folder holding both runs."""
    server = start_viewer(runs.folder, cwd=tmp_path)
    yield server
    server.stop()


def _browser_problem() -> str | None:
    if not CHROMIUM.exists():
        return f"{NO_BROWSER} ({CHROMIUM} is missing)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: make installs the dev extra"
    return None


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """Headless Chromium (skipped without it; failed with ``OSMO_RUN_REQUIRE_BROWSER=1``).
    Package-scoped: Playwright's sync API keeps an event loop running in the main thread
    while it is open, so tests after ``tests/view`` that call ``asyncio.run`` would fail."""
    problem = _browser_problem()
    if problem is not None:
        if os.environ.get("OSMO_RUN_REQUIRE_BROWSER") == "1":
            pytest.fail(f"OSMO_RUN_REQUIRE_BROWSER=1 but {problem}", pytrace=False)
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    profile = Path(tempfile.mkdtemp(prefix="osmo-run-view-chromium-"))
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh tab; the test fails on any script error the page reports."""
    tab = browser.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    tab.close()
    assert not errors, f"script errors on the page: {errors}"


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot as a test artifact (and, when asked, for the README)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("OSMO_RUN_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, SCREENSHOTS / f"{name}.png")
    return path


def wait_until(condition: Any, timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``condition()`` until true (generous: CI machines are busy)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
