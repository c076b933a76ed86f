"""The systemic-failure breaker in real harbor runs: every row's trial fails the same way,
so the run stops after K trials, with one line and exit 5, and leaves no container or
network behind.

Two ways a task's environment cannot start: ``bad-image`` names an image that is neither
here nor pullable (refused before a trial starts), and ``no-start`` asks for more CPUs than
the machine has (Docker refuses the container after compose created the trial's network).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from osmo_run.errors import ExitCode
from tests.harbor.conftest import HarborRun, harbor_spec, run_harbor

ROWS = 12
K = 3


def _left_behind(run_id: str) -> list[str]:
    """The containers and networks labelled with the run's id (``osmo-run.run-id``)."""
    label = f"label=osmo-run.run-id={run_id}"
    left = []
    for kind in (["ps", "-a"], ["network", "ls"]):
        listing = subprocess.run(
            ["docker", *kind, "--filter", label, "--format", "{{.Names}}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        left += listing.stdout.split()
    return left


def _run_task(tmp_path: Path, task: str) -> HarborRun:
    # Row ids unique to this test run: another checkout's run may share the engine.
    tag = uuid.uuid4().hex[:8]
    rows = [
        {
            "id": f"{task}-{tag}-{i}",
            "prompt": "hi",
            "label": "42",
            "metadata": {"harbor_task": task},
        }
        for i in range(ROWS)
    ]
    # The --task-dir (calculator) is prebuilt; each row's own task is the one that fails.
    # No retries: infra_error is retried by default, and each retry would fail the same way.
    spec = harbor_spec(concurrency=2, retries={"max_attempts": 1})
    return run_harbor(tmp_path, rows, spec, "--breaker", str(K))


@pytest.mark.docker
@pytest.mark.parametrize(
    ("task", "fault"),
    [
        ("bad-image", "osmo-run/does-not-exist:1"),
        ("no-start", "Docker compose command failed for environment no-start"),
    ],
)
def test_a_task_environment_that_cannot_start_stops_the_run_after_k_trials(
    tmp_path: Path, task: str, fault: str
) -> None:
    run = _run_task(tmp_path, task)

    assert run.returncode == ExitCode.SYSTEMIC_FAILURE, run.stdout + run.stderr
    recorded = list(run.rows.values())
    assert K <= len(recorded) <= K + 1, "K in a row trip it; the 1 other trial in flight ends"
    assert {(r["status"], r["error_category"], r["error_phase"]) for r in recorded} == {
        ("failure", "infra_error", "setup")
    }
    not_started = ROWS - len(recorded)
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("stopped by")]
    assert line.startswith(f"stopped by the breaker: {K} rollouts in a row failed with infra_error")
    assert fault in line
    assert f"; {not_started} rows not started; " in line
    summary = run.summary
    assert (summary["breaker"]["category"], summary["not_run"]) == ("infra_error", not_started)
    manifest = json.loads(run.output.with_name("results.manifest.json").read_text())
    assert manifest["info"]["breaker"] == K
    assert _left_behind(manifest["run_id"]) == []
    if run.run_id is not None:  # the invocation's trials (no trial ran for bad-image)
        assert run.leftovers == []
