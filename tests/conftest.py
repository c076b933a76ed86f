"""Shared fixtures: dataset writing, output reading and the real ``osmo-run`` console script."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from osmo_run import ExecutionRequest, testing

REPO = Path(__file__).resolve().parents[1]
"""The repository root: the code dir that makes ``tests.workflows:Name`` importable."""

OSMO_RUN = Path(sys.executable).parent / "osmo-run"
"""The installed console script (the dev venv's)."""

Row = dict[str, Any] | str | bytes
"""A dataset line: an object (written as JSON), or raw text/bytes written as is."""

WriteJsonl = Callable[..., Path]
"""The type of the :func:`write_jsonl` fixture."""

SCRIPTED = ("--workflow", "tests.workflows:ScriptedWorkflow")
"""CLI arguments: rows run :class:`tests.workflows.ScriptedWorkflow` (their metadata says how)."""
SCRIPTED_GRADED = (*SCRIPTED, "--grader", "tests.workflows:ScriptedGrader")
""":data:`SCRIPTED`, graded by ``ScriptedGrader`` (reward 1 when the answer is the label)."""
COUNTING = ("--workflow", "tests.workflows:CountingWorkflow")
"""CLI arguments: rows run ``CountingWorkflow``, which counts its runs in the directory
``metadata.calls`` names (see the :func:`calls` fixture and :func:`call_counts`)."""
COUNTING_GRADED = (*COUNTING, "--grader", "tests.workflows:ScriptedGrader")
""":data:`COUNTING`, graded by ``ScriptedGrader``."""


def make_request(
    metadata: dict[str, Any] | None = None,
    label: Any = "hi",
    agent_sec: float | None = 5.0,
    grader_sec: float | None = 5.0,
    row_id: str = "r1",
) -> ExecutionRequest:
    """A one-message request (``user: hi``) for in-process tests: what
    :func:`osmo_run.testing.make_request` makes, with the suite's defaults (id ``r1``,
    label ``hi``, and 5 s deadlines rather than a user's 60 s, so that a hung row fails its
    test quickly)."""
    return testing.make_request(
        "hi",
        label=label,
        metadata=metadata,
        rollout_id=row_id,
        agent_timeout_sec=agent_sec,
        grader_timeout_sec=grader_sec,
    )


def extras_required() -> bool:
    """Whether a missing extra fails its tests instead of skipping them: in CI (``CI`` set,
    or ``OSMO_RUN_REQUIRE_DOCKER=1`` / ``OSMO_RUN_REQUIRE_EXTRAS=1`` as ``.ci/run`` sets),
    where every extra is installed and a skip would hide a broken install."""
    return bool(os.environ.get("CI")) or "1" in (
        os.environ.get("OSMO_RUN_REQUIRE_DOCKER"),
        os.environ.get("OSMO_RUN_REQUIRE_EXTRAS"),
    )


def require_extra(module: str, extra: str) -> ModuleType:
    """``module``, imported; if the extra ``extra`` that installs it is missing, skip the
    calling test (or, at a module's top, the whole module) with a reason naming the extra,
    or fail in CI (:func:`extras_required`)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        message = f"needs the '{extra}' extra: pip install 'osmo-run[{extra}]' ({exc})"
        if extras_required():
            pytest.fail(message, pytrace=False)
        raise pytest.skip.Exception(message, allow_module_level=True) from None


def parquet_modules() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)`` for a test that writes Parquet (see
    :func:`require_extra`: skipped without the ``parquet`` extra)."""
    return require_extra("pyarrow", "parquet"), require_extra("pyarrow.parquet", "parquet")


def jsonl_bytes(rows: list[Row]) -> bytes:
    out = bytearray()
    for row in rows:
        if isinstance(row, bytes):
            out += row
        elif isinstance(row, str):
            out += row.encode("utf-8")
        else:
            out += json.dumps(row, ensure_ascii=False).encode("utf-8")
        out += b"\n"
    return bytes(out)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of an output file, each of which must be a JSON object."""
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), "the last line is incomplete"
    lines = text.split("\n")[:-1]  # not splitlines(): U+2028 may sit inside a JSON string
    return [json.loads(line) for line in lines]


def error_lines(stderr: str) -> list[str]:
    """The ``error:`` lines of a refused command, asserting there is nothing else (no
    traceback)."""
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), stderr
    return lines


def call_counts(calls: Path) -> Counter[str]:
    """How many times a counting workflow ran, per rollout id (one file per rollout id in
    ``calls``, a line per run)."""
    return Counter({p.name: len(p.read_text().splitlines()) for p in calls.iterdir()})


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: nothing forcing colours or a terminal width."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"FORCE_COLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "OSMO_RUN_DEBUG"}
    }
    env["COLUMNS"] = "120"
    env.update(extra)
    return env


def run_on_a_terminal(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 30
) -> tuple[int, bytes]:
    """Run ``args`` with stdout and stderr on a pseudo-terminal (as CI runners often give
    one); return the exit code and everything it wrote there. A process still running
    after ``timeout`` seconds is killed and ``subprocess.TimeoutExpired`` raised (its
    ``output``: what it wrote until then)."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=secondary, stderr=secondary)
    os.close(secondary)
    deadline = time.monotonic() + timeout
    shown = b""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([primary], [], [], left)[0]:
                # still holding the terminal at the deadline: stop it, as subprocess.run would
                proc.kill()
                proc.wait()
                raise subprocess.TimeoutExpired(args, timeout, output=shown)
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(primary)
    return proc.wait(max(deadline - time.monotonic(), 0.1)), shown


@pytest.fixture
def calls(tmp_path: Path) -> Path:
    """An empty directory ``tmp_path/calls`` where counting workflows record each run of a
    row (``metadata.calls``); read it with :func:`call_counts`."""
    path = tmp_path / "calls"
    path.mkdir()
    return path


@pytest.fixture
def write_jsonl(tmp_path: Path) -> WriteJsonl:
    """``write_jsonl(rows, name="data.jsonl") -> path`` in the test's tmp directory."""

    def write(rows: list[Row], name: str = "data.jsonl") -> Path:
        path = tmp_path / name
        path.write_bytes(jsonl_bytes(rows))
        return path

    return write


@contextlib.contextmanager
def _as_a_process(cwd: Path, env: dict[str, str]) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """What a fresh ``osmo-run`` process would have, for one in-process run: ``cwd``, the
    environment ``env``, captured stdout and stderr; afterwards the test's own again, and
    the modules the run imported from outside the venv (a test's code in its tmp dir) are
    forgotten, so the next run imports its own."""
    before_cwd, before_env, before_modules = Path.cwd(), dict(os.environ), set(sys.modules)
    stdout, stderr = io.StringIO(), io.StringIO()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            yield stdout, stderr
    finally:
        os.chdir(before_cwd)
        os.environ.clear()
        os.environ.update(before_env)
        for name in set(sys.modules) - before_modules:
            origin = getattr(sys.modules[name], "__file__", None) or ""
            if origin and not origin.startswith((sys.prefix, str(REPO / "osmo_run"))):
                del sys.modules[name]


class _TimeLimitReached(BaseException):
    """Raised into the main thread by :func:`_time_limit`'s alarm: a ``BaseException``, so
    that the CLI's own ``except Exception`` (one error line) does not catch it."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_TimeLimitReached` in the main thread after ``seconds``. An alarm already
    armed (pytest-timeout's, for the whole test) that would fire first is left alone;
    otherwise it is re-armed afterwards with the time it had left, and its handler put back."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach only the main thread: no limit here
        return
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer_left and outer_left <= seconds:
        yield  # the outer alarm fires first
        return

    def reached(signum: int, frame: object) -> None:
        raise _TimeLimitReached

    started = time.monotonic()
    outer = signal.signal(signal.SIGALRM, reached)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer)
        if outer_left:
            signal.setitimer(
                signal.ITIMER_REAL, max(outer_left - (time.monotonic() - started), 0.001)
            )


class CLI:
    """Runs ``osmo-run`` from the test's tmp directory: in this process by default (the same
    entry point as the console script, without the cost of a new interpreter), or as the
    real console script in a subprocess with :meth:`subprocess`, for what needs a process of
    its own (signals, exit without waiting for abandoned work)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(
        self, *args: str | Path, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``osmo-run ARGS...`` in this process. A run still going after ``timeout`` seconds
        is stopped and ``subprocess.TimeoutExpired`` raised, as :meth:`subprocess` would
        (on the main thread only: the limit is a ``SIGALRM``)."""
        from osmo_run.cli import run_cli

        argv = [*map(str, args)]
        command = ["osmo-run", *argv]
        with _as_a_process(self.cwd, env or cli_env()) as (stdout, stderr):
            try:
                with _time_limit(timeout):
                    code = run_cli(argv)
            except _TimeLimitReached:
                raise subprocess.TimeoutExpired(
                    command, timeout, output=stdout.getvalue(), stderr=stderr.getvalue()
                ) from None
        return subprocess.CompletedProcess(command, code, stdout.getvalue(), stderr.getvalue())

    def subprocess(
        self, *args: str | Path, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The real console script in a subprocess."""
        return subprocess.run(
            [str(OSMO_RUN), *map(str, args)],
            cwd=self.cwd,
            env=env or cli_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def local(
        self,
        dataset: Path,
        *args: str | Path,
        timeout: float = 60,
        env: dict[str, str] | None = None,
        in_process: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``osmo-run local DATASET --code-dir REPO ARGS...``"""
        run = self if in_process else self.subprocess
        return run("local", dataset, "--code-dir", REPO, *args, timeout=timeout, env=env)


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    return CLI(tmp_path)


@pytest.fixture
def stubborn_released() -> Iterator[None]:
    """Lets StubbornWorkflow run, and stops any abandoned one when the test ends."""
    from tests.workflows import StubbornWorkflow

    StubbornWorkflow.release = False
    yield
    StubbornWorkflow.release = True
