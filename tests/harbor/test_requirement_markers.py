"""Requirements in a real trial: environment markers are decided for the trial's Python,
not the host's (issue 28, item 7), and an unwritable cache directory is one line (item
13). The trial image ``osmo-run/bookworm`` runs Python 3.11; osmo-run runs on 3.12+.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from osmo_run.backends.harbor.requirements import RequirementSet  # noqa: E402
from osmo_run.backends.harbor.wheelhouse import TargetPython  # noqa: E402
from osmo_run.errors import RequirementsError  # noqa: E402
from tests.harbor.conftest import CALCULATOR_TASK, HERE, OSMO_RUN, cli_env, run_harbor, write_inputs  # noqa: E402

MARKED = ["pyyaml; python_version >= '3.12'", "six; python_version < '3.12'"]


def _spec(requirements: Any) -> dict[str, Any]:
    return {
        "workflow": "staging_workflows:ListingWorkflow",
        "grader": "staging_workflows:AlwaysOne",
        "code_dir": str(HERE),
        "timeouts": {"agent_sec": 60, "grader_sec": 30},
        "requirements": requirements,
        "harbor": {"task_dir": str(CALCULATOR_TASK)},
    }


ROWS = [{"id": "imports", "prompt": "hi", "label": "x", "metadata": {"imports": ["six", "yaml"]}}]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("prebuild", ["--prebuild", "--no-prebuild"])
def test_markers_hold_for_the_trials_python(tmp_path: Path, prebuild: str) -> None:
    env = cli_env(OSMO_RUN_CACHE_DIR=str(tmp_path / "cache"))
    run = run_harbor(tmp_path, ROWS, _spec(MARKED), prebuild, env=env, timeout=900)
    assert run.returncode == 0, run.stderr
    imports = run.rows["imports"]["info"]["imports"]
    assert imports == {"six": "ok", "yaml": "ModuleNotFoundError: No module named 'yaml'"}


@pytest.mark.docker
def test_unwritable_cache_dir_is_one_line(tmp_path: Path) -> None:
    cache = tmp_path / "not-a-directory"
    cache.write_text("a file where the cache should be\n")
    env = cli_env(OSMO_RUN_CACHE_DIR=str(cache))
    run = run_harbor(tmp_path / "run", ROWS, _spec(["six"]), env=env, timeout=300)
    assert run.returncode == 2, run.stderr
    assert len(run.error_lines) == 1, run.stderr
    line = run.error_lines[0]
    assert line.startswith(f"error: {cache}/"), line
    assert "set OSMO_RUN_CACHE_DIR to a writable directory" in line, line
    assert run.rows == {}

    args = write_inputs(tmp_path / "validate", None, _spec(["six"]))
    done = subprocess.run(
        [str(OSMO_RUN), "validate", args[-1], "--task-dir", str(CALCULATOR_TASK)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "internal error" not in said and "Traceback" not in said, said
    assert f"{cache}/" in said and "set OSMO_RUN_CACHE_DIR to a writable directory" in said


@given(
    minor=st.integers(min_value=8, max_value=20),
    bound=st.integers(min_value=8, max_value=20),
    machine=st.sampled_from(["x86_64", "aarch64"]),
)
def test_markers_follow_the_target_not_the_host(minor: int, bound: int, machine: str) -> None:
    target = TargetPython(f"3.{minor}", (f"manylinux_2_36_{machine}",), full_version=f"3.{minor}.4")
    requirements = RequirementSet(
        (
            f"below; python_version < '3.{bound}'",
            f"arm; platform_machine == 'aarch64' and python_full_version >= '3.{minor}.4'",
            "windows; sys_platform == 'win32'",
            "always",
        )
    )
    kept = requirements.for_interpreter(target.marker_environment()).requirements
    expected = ["below"] if minor < bound else []
    expected += ["arm"] if machine == "aarch64" else []
    assert list(kept) == [*expected, "always"]


@pytest.mark.parametrize("marker", ["python_version ~= 'abc'", "python_full_version ~= 'x.y'"])
def test_a_marker_that_cannot_be_decided_is_one_requirements_error(marker: str) -> None:
    target = TargetPython("3.11", ("manylinux_2_36_x86_64",), full_version="3.11.2")
    with pytest.raises(RequirementsError, match="cannot be decided for the trial's Python"):
        RequirementSet((f"six; {marker}",)).for_interpreter(target.marker_environment())
