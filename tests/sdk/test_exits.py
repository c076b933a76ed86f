"""``sys.exit`` in a workflow or grader is reported with the exit status a process ending
that way reports, whatever the argument (issue 28, item 12)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from osmo_run.sdk.exits import exit_code


@pytest.mark.parametrize("argument", ["None", "0", "3", "255", "256", "-1", "True", "'bye'", "3.5"])
def test_exit_code_is_what_the_process_would_report(argument: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.exit({argument})"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert exit_code(SystemExit(eval(argument))) == done.returncode
