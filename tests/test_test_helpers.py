"""The test suite's own helpers keep their promises: a time limit is a time limit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CLI, cli_env, run_on_a_terminal


def test_the_in_process_cli_stops_a_run_at_its_timeout(
    cli: CLI, write_jsonl: Callable[..., Path], tmp_path: Path
) -> None:
    data = write_jsonl([{"id": "slow", "prompt": "hi", "metadata": {"sleep": 60}}])
    before_cwd, before_env = Path.cwd(), dict(os.environ)
    alarm = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        cli.local(data, "--workflow", "tests.workflows:ScriptedWorkflow", timeout=1.5)
    assert time.monotonic() - started < 20  # not the row's 60 s
    assert raised.value.timeout == 1.5
    assert raised.value.cmd[:2] == ["osmo-run", "local"]
    # the test's own process state is back, and the next run works
    assert (Path.cwd(), dict(os.environ)) == (before_cwd, before_env)
    assert signal.getsignal(signal.SIGALRM) == alarm
    quick = write_jsonl([{"id": "quick", "prompt": "hi"}], name="quick.jsonl")
    done = cli.local(quick, "--workflow", "tests.workflows:ScriptedWorkflow", "-o", "again")
    assert done.returncode == 0, done.stderr


def test_the_in_process_cli_keeps_a_longer_outer_alarm(cli: CLI) -> None:
    """pytest-timeout arms SIGALRM for the whole test: a CLI call re-arms what is left."""
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 3.0)
        assert cli("--version", timeout=30).returncode == 0
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < remaining <= 3.0
        signal.setitimer(signal.ITIMER_REAL, 0.01)
        time.sleep(0.2)
        assert fired == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_the_terminal_helper_stops_a_process_that_holds_the_terminal(tmp_path: Path) -> None:
    script = "import time; print('started', flush=True); time.sleep(60)"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_on_a_terminal([sys.executable, "-c", script], tmp_path, cli_env(), timeout=1.5)
    assert time.monotonic() - started < 20
    assert isinstance(raised.value.output, bytes) and b"started" in raised.value.output
