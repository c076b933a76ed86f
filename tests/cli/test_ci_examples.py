"""The sharding examples under ``examples/ci/`` work as committed: their own commands (the
GitHub Actions matrix's ``run:`` steps, the Slurm script, the Kubernetes Job's container
command) run here, shard by shard, and ``osmo-run report`` merges the shards into the
summary of the whole dataset. Only the schedulers are missing: the test sets the variables
they would set (``matrix.shard``, ``SLURM_ARRAY_TASK_ID``, ``JOB_COMPLETION_INDEX``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import OSMO_RUN, REPO, cli_env, read_jsonl

CI = REPO / "examples" / "ci"
EXAMPLE_ROWS = len((REPO / "datasets" / "example.jsonl").read_text(encoding="utf-8").splitlines())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working directory laid out like a checkout (datasets, configs, examples)."""
    for name in ("datasets", "configs", "examples"):
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def _bash(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = f"{OSMO_RUN.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env=cli_env(PATH=path, **env),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _merged(cwd: Path, pattern: str) -> subprocess.CompletedProcess[str]:
    """``osmo-run report`` over the shard runs matching ``pattern`` (as a shell expands it)."""
    return _bash(f"osmo-run report {pattern}", cwd)


def _assert_shards_cover_the_dataset(shards: list[Path]) -> None:
    """Every row of the example dataset in exactly one shard."""
    row_ids = [row["row_id"] for shard in shards for row in read_jsonl(shard)]
    assert len(row_ids) == len(set(row_ids)) == EXAMPLE_ROWS
    assert all(read_jsonl(shard) for shard in shards)  # each shard ran some rows


def _step(job: dict[str, Any], name: str) -> str:
    [step] = [step for step in job["steps"] if step.get("name") == name]
    run: str = step["run"]
    return run


def test_the_github_actions_matrix_runs_two_shards_and_merges_them(project: Path) -> None:
    workflow = yaml.safe_load((CI / "shard-matrix.yml").read_text(encoding="utf-8"))
    shards = int(workflow["env"]["SHARDS"])
    matrix = workflow["jobs"]["shard"]["strategy"]["matrix"]["shard"]
    assert matrix == list(range(1, shards + 1)) == [1, 2]
    run_shard = _step(workflow["jobs"]["shard"], "Run this shard")
    for k in matrix:
        done = _bash(run_shard.replace("${{ matrix.shard }}", str(k)), project, SHARDS=str(shards))
        assert done.returncode == 0, done.stdout + done.stderr  # exit 1 is tolerated, 2 is not
    outputs = [project / "shards" / f"shard-{k}" / "results.jsonl" for k in matrix]
    _assert_shards_cover_the_dataset(outputs)
    merge = _step(workflow["jobs"]["merge"], "Merge the shards into one summary")
    assert "${{" not in merge
    merged = _bash(merge, project)
    assert merged.returncode == 1, merged.stdout + merged.stderr  # the example fails rows
    assert re.search(rf"^rows\s+{EXAMPLE_ROWS} \(", merged.stdout, re.MULTILINE), merged.stdout
    assert "missing" not in merged.stdout.lower(), merged.stdout
    one = _merged(project, "shards/shard-1")
    assert "missing shards: 2/2; this summary leaves their rows out" in one.stdout, one.stdout


def test_the_slurm_array_script_runs_each_task_as_a_shard(project: Path) -> None:
    script = str(CI / "slurm-array.sbatch")
    for k in (1, 2):
        done = _bash(script, project, SLURM_ARRAY_TASK_ID=str(k), SLURM_ARRAY_TASK_COUNT="2")
        assert done.returncode == 0, done.stdout + done.stderr
    _assert_shards_cover_the_dataset(
        [project / "shards" / f"shard-{k}" / "results.jsonl" for k in (1, 2)]
    )
    assert _merged(project, "shards/shard-*").returncode == 1
    refused = _bash(script, project)
    assert refused.returncode != 0 and "Slurm array task" in refused.stderr


def test_the_kubernetes_indexed_job_command_runs_each_index_as_a_shard(project: Path) -> None:
    job = yaml.safe_load((CI / "k8s-indexed-job.yaml").read_text(encoding="utf-8"))
    spec = job["spec"]
    [container] = spec["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert spec["completionMode"] == "Indexed"
    assert int(env["SHARDS"]) == spec["completions"] == spec["parallelism"]
    command = container["args"][0].replace("/runs/", f"{project}/runs/")
    for index in range(2):  # two of the Job's pods, with two shards in all
        done = _bash(command, project, SHARDS="2", JOB_COMPLETION_INDEX=str(index))
        assert done.returncode == 0, done.stdout + done.stderr
    runs = [project / "runs" / f"shard-{k}" / "results.jsonl" for k in (1, 2)]
    _assert_shards_cover_the_dataset(runs)
    manifest = json.loads(runs[1].with_name("results.manifest.json").read_text())
    assert manifest["defining"]["shard"] == "2/2"  # index 1 is the second shard
