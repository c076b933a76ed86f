"""A dataset is streamed: peak memory does not grow with the number of rows."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import OSMO_RUN, REPO, cli_env

MB = 1024  # ru_maxrss is in KiB on Linux


def _dataset(path: Path, rows: int) -> Path:
    with open(path, "w") as handle:
        for i in range(rows):
            handle.write(
                f'{{"prompt": "question {i}?", "label": "{i}", "metadata": {{"n": {i}}}}}\n'
            )
    return path


def _peak_rss_kib(tmp_path: Path, dataset: Path) -> int:
    """Run the CLI on ``dataset`` and return the peak RSS of that process alone."""
    output = tmp_path / f"{dataset.stem}.out.jsonl"
    args = [str(OSMO_RUN), "local", str(dataset), "--code-dir", str(REPO)]
    args += ["--workflow", "tests.workflows:NoopWorkflow", "--display", "none", "-c", "200"]
    proc = subprocess.Popen(
        [*args, "-o", str(output)],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.stderr is not None
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.returncode == 0, stderr
    return usage.ru_maxrss


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_dataset(tmp_path: Path) -> None:
    small = _peak_rss_kib(tmp_path, _dataset(tmp_path / "small.jsonl", 10_000))
    large_dataset = _dataset(tmp_path / "large.jsonl", 100_000)
    large = _peak_rss_kib(tmp_path, large_dataset)
    assert large < small + 25 * MB, f"10k rows: {small // MB} MB, 100k rows: {large // MB} MB"
    with open(tmp_path / "large.out.jsonl", "rb") as handle:
        assert sum(1 for _ in handle) == 100_000
