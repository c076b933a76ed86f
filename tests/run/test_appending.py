"""``append_line``: the one write loop of the results file and the turns file. A line
goes out whole, however short the OS's writes; a write that fails leaves the file as it
was before the line, and says why in one line."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from osmo_run.errors import OutputError
from osmo_run.run.writing import appending
from osmo_run.run.writing.appending import append_line

FIRST = '{"row_id": "a"}\n'


@pytest.fixture
def log(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A run file holding one complete line, open for appending."""
    path = tmp_path / "results.jsonl"
    path.write_text(FIRST, encoding="utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    yield path, fd
    os.close(fd)


def test_short_writes_go_on_until_the_whole_line_is_out(
    log: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, fd = log
    real_write = os.write
    monkeypatch.setattr(appending.os, "write", lambda fd, data: real_write(fd, data[:3]))
    size = append_line(fd, '{"row_id": "b", "text": "é"}', len(FIRST), "failed")
    assert path.read_text(encoding="utf-8") == FIRST + '{"row_id": "b", "text": "é"}\n'
    assert size == path.stat().st_size


def test_a_write_failing_midway_cuts_the_partial_line_and_says_why(
    log: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, fd = log
    real_write = os.write
    calls = 0

    def full_disk(fd: int, data: memoryview) -> int:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data[:5])  # part of the line reached the file

    monkeypatch.setattr(appending.os, "write", full_disk)
    with pytest.raises(OutputError) as raised:
        append_line(fd, '{"row_id": "b"}', len(FIRST), f"{path}: writing failed", "; after")
    assert str(raised.value) == (
        f"{path}: writing failed: No space left on device; free some space; after"
    )
    assert path.read_text(encoding="utf-8") == FIRST  # the torn line is gone
