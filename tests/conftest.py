"""Shared fixtures: dataset writing, output reading and the real ``osmo-run`` console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from osmo_run import ExecutionRequest

REPO = Path(__file__).resolve().parents[1]
"""The repository root: the code dir that makes ``tests.workflows:Name`` importable."""

OSMO_RUN = Path(sys.executable).parent / "osmo-run"
"""The installed console script (the dev venv's)."""

Row = dict[str, Any] | str | bytes
"""A dataset line: an object (written as JSON), or raw text/bytes written as is."""


def make_request(
    metadata: dict[str, Any] | None = None,
    label: Any = "hi",
    agent_sec: float | None = 5.0,
    grader_sec: float | None = 5.0,
    row_id: str = "r1",
) -> ExecutionRequest:
    """A one-message request (``user: hi``) for in-process tests."""
    return ExecutionRequest(
        id=row_id,
        prompt=[{"role": "user", "content": "hi"}],
        label=label,
        metadata=metadata or {},
        agent_timeout_sec=agent_sec,
        grader_timeout_sec=grader_sec,
    )


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


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[..., Path]:
    """``write_jsonl(rows, name="data.jsonl") -> path`` in the test's tmp directory."""

    def write(rows: list[Row], name: str = "data.jsonl") -> Path:
        path = tmp_path / name
        path.write_bytes(jsonl_bytes(rows))
        return path

    return write


class CLI:
    """Runs the real ``osmo-run`` script in a subprocess, from the test's tmp directory."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(
        self, *args: str | Path, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
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
    ) -> subprocess.CompletedProcess[str]:
        """``osmo-run local DATASET --code-dir REPO ARGS...``"""
        return self("local", dataset, "--code-dir", REPO, *args, timeout=timeout, env=env)


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
