"""An install without an extra (pyarrow, harbor) still collects every test: what needs the
extra is skipped with a reason naming it, the rest runs. In CI a missing extra fails.

The dev venv has every extra, so the extras are hidden from a pytest in a subprocess by a
``sitecustomize`` on its ``PYTHONPATH`` whose import hook refuses them, as an install
without them would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BLOCKER = """
import importlib.abc, os, sys

BLOCKED = set(os.environ["OSMO_TEST_BLOCKED_MODULES"].split(","))


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Refuse())
"""

CI_VARIABLES = ("CI", "OSMO_RUN_REQUIRE_DOCKER", "OSMO_RUN_REQUIRE_EXTRAS")


def _pytest_without(
    tmp_path: Path, blocked: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    hook = tmp_path / "blocker"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(BLOCKER)
    environment = {k: v for k, v in os.environ.items() if k not in CI_VARIABLES}
    environment.update(
        PYTHONPATH=os.pathsep.join([str(hook), str(REPO)]),
        OSMO_TEST_BLOCKED_MODULES=blocked,
        **env,
    )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )


@pytest.mark.slow
def test_without_pyarrow_and_harbor_every_test_is_collected_and_theirs_skip(
    tmp_path: Path,
) -> None:
    done = _pytest_without(tmp_path, "pyarrow,harbor", "--collect-only", "tests")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "error" not in done.stdout.splitlines()[-1]
    assert "needs the 'harbor' extra: pip install 'osmo-run[harbor]'" in done.stdout
    assert "needs the 'parquet' extra: pip install 'osmo-run[parquet]'" in done.stdout


@pytest.mark.slow
def test_without_pyarrow_only_the_parquet_tests_of_a_module_skip(tmp_path: Path) -> None:
    """Modules where some tests use Parquet: those skip, the CSV and JSONL ones still run."""
    mixed = (
        "tests/run/test_readers.py",
        "tests/run/test_columns.py",
        "tests/cli/test_bad_datasets.py",
        "tests/cli/test_data_faults.py",
    )
    done = _pytest_without(tmp_path, "pyarrow", "-m", "not slow", *mixed)
    assert done.returncode == 0, done.stdout[-3000:]
    summary = done.stdout.splitlines()[-1]
    found = re.search(r"(\d+) passed, (\d+) skipped", summary)
    assert found is not None and "failed" not in summary, summary
    assert int(found[1]) >= 40 and int(found[2]) >= 10, summary
    assert "needs the 'parquet' extra" in done.stdout


@pytest.mark.slow
def test_in_ci_a_missing_extra_fails_instead_of_skipping(tmp_path: Path) -> None:
    files = ("tests/harbor/test_results.py", "tests/cli/test_parquet_types.py")
    done = _pytest_without(
        tmp_path, "pyarrow,harbor", "--collect-only", *files, OSMO_RUN_REQUIRE_DOCKER="1"
    )
    assert done.returncode != 0
    assert "2 errors" in done.stdout.splitlines()[-1], done.stdout[-2000:]
    assert "needs the 'harbor' extra" in done.stdout
    assert "needs the 'parquet' extra" in done.stdout
