"""examples/train/grpo.py runs: a GRPO-shaped loop through osmo-run serve against the
embedded model (skipped without it, failed in CI)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, cli_env
from tests.llm.conftest import require_embedded


@pytest.mark.slow
def test_the_training_example_runs_two_steps_with_group_advantages() -> None:
    require_embedded()
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "train" / "grpo.py"), "--steps", "2",
         "--prompts", "2", "--samples", "4"],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    groups = [line for line in lines if " prompt " in line]
    assert len(groups) == 4 and all("advantages [" in line for line in groups)
    assert lines[-1].startswith("step 2: mean reward ")
    assert lines[-1].endswith("policy now version 3")
