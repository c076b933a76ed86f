"""What ``osmo-run harbor`` refuses before any row runs: exit code 2, one ``error:`` line,
no traceback and no result rows."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from harbor.trial.queue import TrialQueue  # noqa: E402

from osmo_run.backends.harbor import HarborBackend  # noqa: E402
from osmo_run.sdk.config import AgentWorkflowConfig, ConcurrencyConfig  # noqa: E402
from tests.harbor.conftest import (  # noqa: E402
    CALCULATOR_TASK,
    HERE,
    TASKS_ROOT,
    WORKFLOW,
    HarborRun,
    cli_env,
    harbor_spec,
    run_harbor,
)

ROWS = [{"id": "r1", "prompt": "hi", "label": "42"}]
DAYTONA_INSTALLED = importlib.util.find_spec("daytona") is not None


def assert_refused(run: HarborRun) -> str:
    """Exit 2 with exactly one ``error:`` line, no traceback, no row; return the line."""
    assert run.returncode == 2, run.stdout + run.stderr
    assert len(run.error_lines) == 1, run.stderr
    line = run.error_lines[0]
    assert line.startswith("error: "), line
    assert "Traceback" not in run.stderr + run.stdout
    assert run.rows == {}
    return line


@pytest.mark.docker
def test_task_dir_without_task_toml_exits_2_with_one_line(tmp_path: Path) -> None:
    task = tmp_path / "not-a-task"
    task.mkdir()
    (task / "instruction.md").write_text("What is 6 * 7?\n")
    spec = harbor_spec(harbor={"task_dir": str(task)})
    line = assert_refused(run_harbor(tmp_path, ROWS, spec))
    assert line == f"error: --task-dir {task}: no task.toml (a Harbor task needs one)"


@pytest.mark.docker
def test_task_image_that_cannot_be_pulled_exits_2_with_prebuild(tmp_path: Path) -> None:
    """With prebuild, the --task-dir image is built before any row runs; an image that is
    neither here nor pullable stops the run there."""
    spec = harbor_spec(harbor={"task_dir": str(TASKS_ROOT / "bad-image")})
    line = assert_refused(run_harbor(tmp_path, ROWS, spec))
    assert "osmo-run/does-not-exist:1" in line
    assert "could not be pulled" in line


def test_daytona_without_credentials_exits_2_with_one_clear_line(tmp_path: Path) -> None:
    """``--env daytona`` with no DAYTONA_* variables. Checked before any row runs, so
    Daytona's cloud is never reached (it is unreachable from here anyway). Without the
    ``daytona`` extra the line says how to install it; with it, which variables to set."""
    line = assert_refused(run_harbor(tmp_path, ROWS, harbor_spec(), "--env", "daytona"))
    assert "daytona" in line.lower()
    if DAYTONA_INSTALLED:
        assert "DAYTONA_API_KEY" in line
    else:
        assert "pip install 'harbor[daytona]'" in line


_HIDE_DAYTONA = """
import importlib.metadata as metadata

_distribution = metadata.distribution


def distribution(name):
    if name.lower().replace("_", "-") == "daytona":
        raise metadata.PackageNotFoundError(name)
    return _distribution(name)


metadata.distribution = distribution
"""


def test_daytona_key_without_the_extra_exits_2_naming_the_install(tmp_path: Path) -> None:
    """A DAYTONA_API_KEY is set but the ``daytona`` extra is missing: one line, not one
    infra_error per row. The extra is installed here (CI tests Daytona against a fake API),
    so this run hides its package from the process with a ``sitecustomize`` that says it is
    not installed; Daytona's cloud is never reached."""
    hider = tmp_path / "hide-daytona"
    hider.mkdir()
    (hider / "sitecustomize.py").write_text(_HIDE_DAYTONA, encoding="utf-8")
    env = cli_env(DAYTONA_API_KEY="not-a-real-key")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hider), env.get("PYTHONPATH")]))
    run = run_harbor(tmp_path, ROWS, harbor_spec(), "--env", "daytona", env=env)
    line = assert_refused(run)
    assert line == (
        "error: --env daytona: Harbor's 'daytona' extra is not installed; "
        "install it with: pip install 'harbor[daytona]'"
    )


def test_loopback_model_endpoint_is_refused_for_a_remote_environment(tmp_path: Path) -> None:
    """A model server on 127.0.0.1 is relayed into local Docker containers, but a remote
    environment cannot reach it: refused before any row runs. (Harbor's abstract
    ``BaseEnvironment`` stands in for a remote environment: only its preflight runs.)"""
    spec = harbor_spec(llm={"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    run = run_harbor(
        tmp_path,
        ROWS,
        spec,
        "--environment-import-path",
        "harbor.environments.base:BaseEnvironment",
    )
    line = assert_refused(run)
    assert "http://127.0.0.1:9/v1 is a loopback address" in line


def test_health_reports_the_concurrency_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    backend = HarborBackend(
        task_dir=CALCULATOR_TASK,
        workflow=WORKFLOW,
        workflow_config=AgentWorkflowConfig(concurrency=ConcurrencyConfig(max_concurrent=3)),
    )
    health = backend.health()
    assert health["max_concurrency"] == backend.max_concurrency == 3
    assert (health["status"], health["backend"], health["environment"]) == (
        "ok",
        "harbor",
        "docker",
    )
    assert (health["queued"], health["running"]) == (0, 0)


def test_the_window_is_osmo_runs_number_not_harbors_private_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """osmo-run once read ``TrialQueue._n_concurrent``: a Harbor release renaming it would
    have dropped the runner's window to its default (256) without a word."""
    monkeypatch.syspath_prepend(str(HERE))
    made = TrialQueue.__init__

    def renamed(queue: TrialQueue, *args: Any, **kwargs: Any) -> None:
        made(queue, *args, **kwargs)
        queue._harbor_renamed_it = vars(queue).pop("_n_concurrent")  # type: ignore[attr-defined]

    monkeypatch.setattr(TrialQueue, "__init__", renamed)
    backend = HarborBackend(
        task_dir=CALCULATOR_TASK,
        workflow=WORKFLOW,
        workflow_config=AgentWorkflowConfig(concurrency=ConcurrencyConfig(max_concurrent=5)),
    )
    assert backend.max_concurrency == backend.health()["max_concurrency"] == 5
