"""A run without a dataset: the task's ``instruction.md`` is its one row (issue 28, items
5 and 14), through the real ``osmo-run harbor``.

Each run has its own ``TMPDIR`` and cache directory: where the instruction file once went
(``$TMPDIR/osmo-run-instructions/<task name>.jsonl``) a link to another file is planted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.harbor.conftest import CALCULATOR_TASK, HERE, HarborRun, cli_env, run_harbor

WORKFLOW = "staging_workflows:ListingWorkflow"


def _task(parent: Path, instruction: bytes) -> Path:
    """A copy of the calculator task named ``mytask`` under ``parent``."""
    task = parent / "mytask"
    shutil.copytree(CALCULATOR_TASK, task)
    (task / "instruction.md").write_bytes(instruction)
    return task


def _spec(task: Path) -> dict[str, Any]:
    return {
        "workflow": WORKFLOW,
        "code_dir": str(HERE),
        "timeouts": {"agent_sec": 60, "grader_sec": 30},
        "requirements": "none",
        "harbor": {"task_dir": str(task)},
    }


def _run(directory: Path, task: Path, shared: Path) -> HarborRun:
    env = cli_env(TMPDIR=str(shared / "tmp"), OSMO_RUN_CACHE_DIR=str(shared / "cache"))
    return run_harbor(directory, None, _spec(task), env=env, timeout=600)


def _dataset_of(run: HarborRun) -> Path:
    manifest = json.loads(run.output.with_name("results.manifest.json").read_text(encoding="utf-8"))
    return Path(manifest["info"]["dataset_path"])


@pytest.mark.docker
@pytest.mark.slow
def test_two_tasks_of_one_name_each_keep_their_instruction(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "tmp" / "osmo-run-instructions").mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (shared / "tmp" / "osmo-run-instructions" / "mytask.jsonl").symlink_to(victim)

    task_a = _task(tmp_path / "a", b"INSTRUCTION A\n")
    task_b = _task(tmp_path / "b", b"INSTRUCTION B\n")
    first = _run(tmp_path / "run-a", task_a, shared)
    second = _run(tmp_path / "run-b", task_b, shared)

    assert victim.read_text() == "keep me\n"
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.rows["mytask"]["info"]["prompt"] == "INSTRUCTION A\n"
    assert second.rows["mytask"]["info"]["prompt"] == "INSTRUCTION B\n"
    # the first run's recorded dataset (what regrade and the viewer read) is still its own
    dataset_a, dataset_b = _dataset_of(first), _dataset_of(second)
    assert dataset_a != dataset_b
    assert json.loads(dataset_a.read_text(encoding="utf-8"))["prompt"] == "INSTRUCTION A\n"
    assert dataset_a.stat().st_mode & 0o077 == 0
    assert dataset_a.parent.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    ("instruction", "where"),
    [
        (b"caf\xe9 \xff instruction\n", "byte 0xe9 at offset 3"),
        (b"a lone surrogate \xed\xa0\x80 encoded\n", "byte 0xed at offset 17"),
    ],
)
def test_instruction_not_utf8_is_one_line(tmp_path: Path, instruction: bytes, where: str) -> None:
    task = _task(tmp_path, instruction)
    run = _run(tmp_path / "run", task, tmp_path / "shared")
    assert run.returncode == 2, run.stderr
    assert run.error_lines == [
        f"error: {task / 'instruction.md'}: is not UTF-8 text ({where}); save it as UTF-8"
    ]


@pytest.mark.docker
@pytest.mark.slow
def test_unwritable_cache_still_runs_the_instruction_from_a_private_directory(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path, b"INSTRUCTION C\n")
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory\n")
    env = cli_env(OSMO_RUN_CACHE_DIR=str(blocked / "cache"))
    run = run_harbor(tmp_path / "run", None, _spec(task), env=env, timeout=600)
    dataset = _dataset_of(run)
    try:
        assert run.rows["mytask"]["info"]["prompt"] == "INSTRUCTION C\n", run.stderr
        assert dataset.parent.name.startswith("osmo-run-instruction-")
        assert dataset.parent.stat().st_mode & 0o077 == 0
    finally:
        shutil.rmtree(dataset.parent, ignore_errors=True)
