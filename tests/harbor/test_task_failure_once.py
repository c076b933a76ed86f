"""A row's own task (``metadata.harbor_task``) whose image cannot be had fails once per
run: its later rows get the same one-line failure without another pull, and without
holding the other rows behind the lock while it is tried again.

The real ``docker`` runs; a wrapper put first on ``PATH`` only logs each command osmo-run
gives it, so the test can count the pulls.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.harbor.conftest import HarborRun, cli_env, harbor_spec, logging_docker, run_harbor

pytestmark = pytest.mark.docker

ROWS = 4
BAD_IMAGE = "osmo-run/does-not-exist:1"  # tests/harbor/tasks/bad-image/task.toml


def _run_bad_image_rows(tmp_path: Path, *args: str, **spec: Any) -> tuple[HarborRun, list[str]]:
    tag = uuid.uuid4().hex[:8]  # another checkout's run may share the engine
    rows = [
        {"id": f"bad-{tag}-{i}", "prompt": "hi", "metadata": {"harbor_task": "bad-image"}}
        for i in range(ROWS)
    ]
    path, log = logging_docker(tmp_path)
    env = cli_env(**path)
    spec = harbor_spec(concurrency=2, retries={"max_attempts": 1}, **spec)
    run = run_harbor(tmp_path, rows, spec, "--no-breaker", *args, env=env)
    pulls = [line for line in log.read_text().splitlines() if line.startswith("pull ")]
    return run, pulls


def _assert_every_row_failed_alike(run: HarborRun) -> None:
    assert run.returncode == 1, run.stdout + run.stderr
    assert len(run.rows) == ROWS
    assert {(r["error_category"], r["error_phase"]) for r in run.rows.values()} == {
        ("infra_error", "setup")
    }
    [message] = {r["error_message"] for r in run.rows.values()}  # the same line for each
    assert BAD_IMAGE in message and "\n" not in message, message


def test_a_prebuilt_task_image_that_fails_is_tried_once(tmp_path: Path) -> None:
    run, pulls = _run_bad_image_rows(tmp_path)
    _assert_every_row_failed_alike(run)
    assert pulls == [f"pull -q {BAD_IMAGE}"], pulls


def test_requirements_for_a_task_image_that_fails_are_tried_once(tmp_path: Path) -> None:
    """Without prebuilding, the requirements are installed for each task's image: the
    image cannot be had, once, and each row says so."""
    run, pulls = _run_bad_image_rows(tmp_path, "--no-prebuild", requirements={"add": ["pyyaml"]})
    _assert_every_row_failed_alike(run)
    assert pulls == [f"pull -q {BAD_IMAGE}"], pulls
