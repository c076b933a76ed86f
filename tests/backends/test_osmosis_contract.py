"""What code written for osmosis-ai's LocalBackend relies on, run on osmo-run's: async result
callbacks and sample sources, ``remove_sample``, grading rows without a label, and an
artifacts directory that degrades instead of failing the row."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from osmo_run import ExecutionResult, GraderConfig, RolloutStatus
from osmo_run.backends.local import LocalBackend
from osmo_run.sdk.types import SAMPLE_REMOVED
from osmo_run.testing import run_rollout
from tests.compat_workflows import CompatGrader, CompatWorkflow
from tests.conftest import make_request


def test_async_result_callbacks_are_awaited_in_order() -> None:
    """osmosis-ai's ``ResultCallback`` is ``async def``: its body must run, and finish
    before the next phase starts."""
    seen: list[tuple[str, RolloutStatus, float | None]] = []

    async def on_workflow(result: ExecutionResult) -> None:
        await asyncio.sleep(0.01)
        seen.append(("workflow", result.status, result.reward))

    async def on_grader(result: ExecutionResult) -> None:
        await asyncio.sleep(0.01)
        seen.append(("grader", result.status, result.reward))

    backend = LocalBackend(CompatWorkflow, grader=CompatGrader)
    request = make_request({"grade": "return:1"})
    asyncio.run(backend.execute(request, on_workflow, on_grader))
    assert seen == [
        ("workflow", RolloutStatus.GRADING, None),
        ("grader", RolloutStatus.SUCCESS, 1.0),
    ]


def test_an_async_sample_source_gives_the_sample() -> None:
    result = asyncio.run(
        run_rollout(
            CompatWorkflow, "hi", label="x", grader=CompatGrader, metadata={"grade": "return:1"}
        )
    )
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    assert result.sample.messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hi"},
    ]
    assert result.sample.metrics == {"source": 1}
    assert result.reward == 1.0


@pytest.mark.parametrize("removed_by", ["workflow", "grader"])
def test_a_removed_sample_is_recorded_as_not_graded_never_as_a_failure(removed_by: str) -> None:
    metadata = (
        {"remove": True, "grade": "return:1"}
        if removed_by == "workflow"
        else {"grade": "return:1,remove"}
    )
    result = asyncio.run(
        run_rollout(CompatWorkflow, "hi", label="hi", grader=CompatGrader, metadata=metadata)
    )
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.grader_skipped == SAMPLE_REMOVED
    assert result.reward is None
    assert result.sample is not None and result.sample.remove_sample
    assert result.to_dict()["sample"]["remove_sample"] is True
    assert (result.timings.grader_sec is None) == (removed_by == "workflow")


def _grade_unlabelled(grade_without_label: bool) -> ExecutionResult:
    results: list[ExecutionResult] = []
    backend = LocalBackend(
        CompatWorkflow,
        grader=CompatGrader,
        grader_config=GraderConfig(grade_without_label=grade_without_label),
    )
    request = make_request({"grade": "label", "tests": ["assert add(1, 2) == 3"]}, label=None)
    asyncio.run(backend.execute(request, results.append))
    return results[-1]


def test_a_row_without_a_label_is_graded_when_asked_with_ctx_label_none() -> None:
    graded = _grade_unlabelled(grade_without_label=True)
    assert graded.status is RolloutStatus.SUCCESS, graded.error_message
    assert (graded.reward, graded.grader_skipped) == (1.0, None)
    skipped = _grade_unlabelled(grade_without_label=False)
    assert (skipped.reward, skipped.grader_skipped) == (None, "row has no label")


def _artifact_row(root: Path) -> ExecutionResult:
    return asyncio.run(
        run_rollout(
            CompatWorkflow,
            "hi",
            metadata={"artifact": True, "source": False},
            artifacts_dir=root,
        )
    )


def test_an_unusable_artifacts_root_gives_no_directory_and_the_row_goes_on(tmp_path: Path) -> None:
    root = tmp_path / "a-file"
    root.write_text("not a directory")
    result = _artifact_row(root)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    assert result.sample.messages[-1]["content"] == "no artifacts dir"
    (warning,) = result.warnings
    assert warning.startswith(f"artifacts_dir is unavailable ({root}/test: ")
    assert warning.endswith("; ctx.artifacts_dir was None")


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A read-only tmpfs (needs root, as in CI): writes fail with EROFS even for root."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "ro"
    mount.mkdir()
    command = ["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(mount)]
    if subprocess.run(command, check=False).returncode:
        pytest.skip("this machine cannot mount a tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_read_only_artifacts_root_gives_no_directory_and_says_so(read_only_dir: Path) -> None:
    result = _artifact_row(read_only_dir)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    assert result.sample.messages[-1]["content"] == "no artifacts dir"
    assert result.warnings == [
        f"artifacts_dir is unavailable ({read_only_dir}/test: Read-only file system); "
        "ctx.artifacts_dir was None"
    ]


def test_with_a_usable_root_the_directory_is_there(tmp_path: Path) -> None:
    result = _artifact_row(tmp_path)
    assert result.sample is not None
    assert result.sample.messages[-1]["content"] == "wrote a note"
    assert (tmp_path / "test" / "note.txt").read_text() == "note"
    assert result.warnings == []
