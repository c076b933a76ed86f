"""Graders whose work is unbounded in their input (math-verify, a user's regex, JSON
Schema), through the real ``osmo-run`` in a subprocess: an answer that would compute for
hours ends as a ``timeout`` of the grader phase at the grader deadline while the other
rows get their right grades, Ctrl-C and SIGTERM still end the run at once, and no process
the run started outlives it, whichever way it ends.

Every process the run starts inherits a tag in its environment, so the leftover check
finds them by that tag wherever they were re-parented to.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from osmo_run.run.writing.records import OutputRecord
from tests.conftest import OSMO_RUN, REPO, WriteJsonl, cli_env, read_jsonl

WORKFLOW = "tests.graders.answer_workflows:AnswerWorkflow"
TAG_VAR = "OSMO_RUN_TEST_RUN_TAG"
POWER_TOWER = "The answer is $\\boxed{9^{9^{9}}}$."
"""math-verify evaluates this power (369 million digits) holding the GIL."""
BACKTRACKING = "^(\\w+\\s?)*$"
"""Exponential backtracking on a run of word characters that ends in a non-word one."""

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")


def tagged_processes(tag: str) -> list[int]:
    """The processes alive now whose environment carries ``tag`` (zombies excluded)."""
    wanted = f"{TAG_VAR}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone, or not ours
        if wanted in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def wait_for_no_tagged(tag: str, timeout: float = 10) -> list[int]:
    """The tagged processes still alive after up to ``timeout`` seconds (a SIGKILLed
    process takes a moment to go)."""
    deadline = time.monotonic() + timeout
    while (alive := tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


class Run:
    """``osmo-run local`` in a subprocess whose stdout lines are collected as they come;
    every process it starts carries :attr:`tag`, and all of them are killed at the end
    (:meth:`close`) so a failing test leaves nothing behind."""

    def __init__(self, cwd: Path, *args: str | Path) -> None:
        self.tag = uuid.uuid4().hex
        self.lines: list[str] = []
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [str(OSMO_RUN), "local", *map(str, args), "--display", "plain"],
            cwd=cwd,
            env=cli_env(**{TAG_VAR: self.tag}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # the test runner's own Ctrl-C must not reach it
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def finish(self, timeout: float) -> tuple[int, str]:
        """The exit code and stderr, failing the test when the run outlives ``timeout``."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"osmo-run still running after {timeout:g}s; stdout: {self.lines}")
        self._reader.join(5)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()

    def close(self) -> None:
        for pid in [self.proc.pid, *tagged_processes(self.tag)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def runs() -> Iterator[Callable[..., Run]]:
    started: list[Run] = []

    def start(cwd: Path, *args: str | Path) -> Run:
        run = Run(cwd, *args)
        started.append(run)
        return run

    yield start
    for run in started:
        run.close()


def write_spec(tmp_path: Path, grader: str, settings: dict[str, Any], grader_sec: float) -> Path:
    spec = {
        "workflow": WORKFLOW,
        "grader": f"osmo_run.graders:{grader}",
        "grader_config": {"settings": settings},
        "code_dir": str(REPO),
        "timeouts": {"grader_sec": grader_sec},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
    return path


def write_rows(write_jsonl: WriteJsonl, rows: dict[str, tuple[Any, str]]) -> Path:
    """One dataset row per ``id: (label, answer)``; the workflow answers ``answer``."""
    return write_jsonl(
        [
            {"id": row_id, "prompt": "What is it?", "label": label, "metadata": {"answer": a}}
            for row_id, (label, a) in rows.items()
        ]
    )


def assert_grader_timeout(row: dict[str, Any], grader_sec: float) -> None:
    """``row`` ended as a timeout of the grader phase at its deadline (a generous margin
    for a busy machine, far below what the computation would take)."""
    OutputRecord.model_validate(row)
    assert (row["status"], row["error_category"], row["error_phase"]) == (
        "failure",
        "timeout",
        "grader",
    ), row["error_message"]
    assert f"its {grader_sec:g}s deadline" in row["error_message"]
    assert row["timings"]["grader_sec"] < grader_sec + 10


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_maths_answer_that_never_ends_is_a_grader_timeout_and_the_run_goes_on(
    runs: Callable[..., Run], tmp_path: Path, write_jsonl: WriteJsonl, isolation: str
) -> None:
    pytest.importorskip("math_verify")
    grader_sec = 20  # the other rows' grades must fit on a busy machine, workers' start too
    dataset = write_rows(
        write_jsonl,
        {
            "tower": ("1", POWER_TOWER),
            "half": ("0.5", "$\\boxed{\\frac{1}{2}}$"),
            "wrong": ("4", "$\\boxed{3}$"),
        },
    )
    spec = write_spec(tmp_path, "MathEquivalence", {}, grader_sec)
    output = tmp_path / "results.jsonl"
    run = runs(tmp_path, dataset, "--spec", spec, "-o", output, "-c", "3", "--isolation", isolation)
    code, stderr = run.finish(timeout=180)
    assert code == 1, stderr
    assert "Traceback" not in stderr
    rows = {row["row_id"]: row for row in read_jsonl(output)}
    assert_grader_timeout(rows["tower"], grader_sec)
    assert (rows["half"]["reward"], rows["wrong"]["reward"]) == (1.0, 0.0)
    assert wait_for_no_tagged(run.tag) == []


def test_a_backtracking_regex_is_a_grader_timeout_and_the_run_goes_on(
    runs: Callable[..., Run], tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    grader_sec = 5
    dataset = write_rows(
        write_jsonl,
        {
            "pathological": ("x", "a" * 40 + "!"),
            "words": ("x", "a few words"),
            "question": ("x", "why?"),
        },
    )
    settings = {"pattern": BACKTRACKING, "compare": "found"}
    spec = write_spec(tmp_path, "RegexMatch", settings, grader_sec)
    output = tmp_path / "results.jsonl"
    run = runs(tmp_path, dataset, "--spec", spec, "-o", output, "-c", "3")
    code, stderr = run.finish(timeout=180)
    assert code == 1, stderr
    rows = {row["row_id"]: row for row in read_jsonl(output)}
    assert_grader_timeout(rows["pathological"], grader_sec)
    assert (rows["words"]["reward"], rows["question"]["reward"]) == (1.0, 0.0)
    assert rows["words"]["info"]["grader"]["explanation"] == (
        f"pattern {BACKTRACKING!r} found: 'a few words'"
    )
    assert wait_for_no_tagged(run.tag) == []


@pytest.mark.parametrize(
    ("sig", "isolation"),
    [(signal.SIGINT, "none"), (signal.SIGTERM, "none"), (signal.SIGINT, "process")],
    ids=["SIGINT", "SIGTERM", "SIGINT-process"],
)
def test_an_interrupt_during_an_endless_grade_ends_the_run_at_once(
    runs: Callable[..., Run],
    tmp_path: Path,
    write_jsonl: WriteJsonl,
    sig: signal.Signals,
    isolation: str,
) -> None:
    pytest.importorskip("math_verify")
    dataset = write_rows(write_jsonl, {"done": ("2", "2"), "tower": ("1", POWER_TOWER)})
    spec = write_spec(tmp_path, "MathEquivalence", {}, grader_sec=600)
    output = tmp_path / "results.jsonl"
    run = runs(tmp_path, dataset, "--spec", spec, "-o", output, "-c", "1", "--isolation", isolation)
    deadline = time.monotonic() + 60
    while not (output.exists() and output.read_text().count("\n") >= 1):
        assert time.monotonic() < deadline and run.proc.poll() is None, run.lines
        time.sleep(0.05)  # until the first row is written: the tower is next, and endless
    time.sleep(2)  # it is being graded now (the answer comes back at once)
    sent = time.monotonic()
    os.kill(run.proc.pid, sig)
    code, stderr = run.finish(timeout=30)
    assert code == 130, stderr
    assert time.monotonic() - sent < 5
    assert "Traceback" not in stderr
    rows = {row["row_id"]: row for row in read_jsonl(output)}
    assert rows["done"]["reward"] == 1.0  # what finished is kept
    assert rows["tower"]["status"] == "cancelled"
    assert wait_for_no_tagged(run.tag) == []


def test_no_grader_process_outlives_a_killed_run(
    runs: Callable[..., Run], tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    """``kill -9`` of the run leaves its grader workers nothing to report to: they end."""
    dataset = write_rows(write_jsonl, {"slow": ("x", "a" * 40 + "!")})
    settings = {"pattern": BACKTRACKING, "compare": "found"}
    spec = write_spec(tmp_path, "RegexMatch", settings, grader_sec=600)
    run = runs(tmp_path, dataset, "--spec", spec)
    deadline = time.monotonic() + 60
    while len(tagged_processes(run.tag)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # the worker that grades the row has started
    assert len(tagged_processes(run.tag)) >= 2, "no grader worker started"
    os.kill(run.proc.pid, signal.SIGKILL)
    run.proc.wait(30)
    assert wait_for_no_tagged(run.tag) == []
