"""The files of a run directory, and reading them back from a finished, partial or
crashed run.

A run's files are named after its results file ``<stem>.jsonl``: ``<stem>.summary.json``,
``<stem>.manifest.json``, ``<stem>.attempts.jsonl`` (attempts a later one replaced) and
``<stem>.turns.jsonl`` (captured model calls) sit beside it, with ``artifacts/`` and
``trials/``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmo_run.errors import InputError
from osmo_run.run.writing.records import record_problem


@dataclass(frozen=True)
class RunPaths:
    """Where one run's files live, derived from its results file."""

    results: Path

    @classmethod
    def locate(cls, target: Path) -> RunPaths:
        """The run at ``target``: a results ``.jsonl`` file, or a run directory holding
        ``results.jsonl`` (or exactly one ``*.jsonl`` with a manifest). Raises
        :class:`InputError` when there is no run there."""
        if target.is_file():
            return cls(target)
        if target.is_dir():
            default = target / "results.jsonl"
            if default.is_file():
                return cls(default)
            candidates = [p for p in target.glob("*.jsonl") if cls(p).manifest.is_file()]
            if len(candidates) == 1:
                return cls(candidates[0])
            raise InputError(f"{target}: no osmo-run results here (expected results.jsonl)")
        raise InputError(f"{target}: no such run directory or results file")

    @property
    def directory(self) -> Path:
        return self.results.parent

    def _sibling(self, suffix: str) -> Path:
        return self.results.with_name(self.results.stem + suffix)

    @property
    def summary(self) -> Path:
        return self._sibling(".summary.json")

    @property
    def manifest(self) -> Path:
        return self._sibling(".manifest.json")

    @property
    def attempts(self) -> Path:
        return self._sibling(".attempts.jsonl")

    @property
    def turns(self) -> Path:
        """The rollouts' captured model calls (``llm.capture: tokens``; see
        :mod:`osmo_run.run.writing.turns`)."""
        return self._sibling(".turns.jsonl")

    @property
    def admitted(self) -> Path:
        """``osmo-run serve``: every rollout admitted, as admitted (no model key), so a
        restarted server runs again those the crash left unfinished."""
        return self._sibling(".admitted.jsonl")

    @property
    def artifacts(self) -> Path:
        return self.directory / "artifacts"

    @property
    def trials(self) -> Path:
        return self.directory / "trials"

    @property
    def errors(self) -> Path:
        """Full error texts of rows whose message was cut (see :mod:`.full_errors`)."""
        return self.directory / "errors"


def repair_torn_tail(path: Path) -> bool:
    """Cut a last line that has no newline (a write cut short by a crash); return whether
    anything was cut. Every complete line is kept."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size == 0:
        return False
    with open(path, "rb+") as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return False
        position = size
        chunk = 64 * 1024
        while position > 0:
            start = max(position - chunk, 0)
            handle.seek(start)
            data = handle.read(position - start)
            newline = data.rfind(b"\n")
            if newline >= 0:
                handle.truncate(start + newline + 1)
                return True
            position = start
        handle.truncate(0)
        return True


@dataclass(frozen=True)
class BadLine:
    """A complete line of a results file that is not a result record."""

    number: int
    reason: str
    """``not valid JSON``, ``not a result record``, or that followed by the first field
    that is not as a record's (``not a result record: reward: …``)."""


def is_record(value: object) -> bool:
    """Whether a decoded line is a result record (see :mod:`osmo_run.run.writing.records`)."""
    return isinstance(value, dict) and "row_id" in value and "status" in value


def iter_records(path: Path, bad: list[BadLine] | None = None) -> Iterator[dict[str, Any]]:
    """Yield each complete record of a results file. A torn last line (a crash mid-write)
    ends the file; any other line that is not a record is left out and, when ``bad`` is
    given, appended to it with its number. Raises :class:`InputError` if the file is
    missing."""
    for _, _, record in iter_records_at(path, bad):
        yield record


def iter_records_at(
    path: Path, bad: list[BadLine] | None = None
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """:func:`iter_records`, each record with where its line begins in the file and the
    line's length in bytes (its newline included)."""
    if not path.is_file():
        raise InputError(f"{path}: results file not found")
    offset = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            at, offset = offset, offset + len(raw)
            if not raw.endswith(b"\n"):
                return  # torn tail: the row had not finished being written
            try:
                record = json.loads(raw)
            except ValueError:
                if bad is not None:
                    bad.append(BadLine(number, "not valid JSON"))
                continue
            problem = record_problem(record) if is_record(record) else ""
            if problem is None:
                yield at, len(raw), record
            elif bad is not None:
                reason = "not a result record"
                bad.append(BadLine(number, f"{reason}: {problem}" if problem else reason))


def first_line_is_record(path: Path) -> bool:
    """Whether the first complete line of ``path`` is a result record (an empty file's
    is not)."""
    with open(path, "rb") as handle:
        first = handle.readline()
    try:
        return first.endswith(b"\n") and is_record(json.loads(first))
    except ValueError:
        return False


def rewrite_without(paths: RunPaths, drop: set[tuple[str, int]]) -> int:
    """Move the records whose ``(row_id, sample_index)`` is in ``drop`` from the results
    file to the attempts file (kept on record), rewriting results atomically. Returns how
    many moved."""
    if not drop:
        return 0
    moved = 0
    tmp = paths.results.with_name(paths.results.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    attempts_fd = os.open(paths.attempts, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with (
        os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as keep,
        os.fdopen(attempts_fd, "a", encoding="utf-8", errors="surrogateescape") as history,
        open(paths.results, encoding="utf-8", errors="surrogateescape") as source,
    ):
        for line in source:
            if not line.endswith("\n"):
                break
            try:
                record = json.loads(line)
                key = (str(record["row_id"]), int(record.get("sample_index", 0)))
            except (ValueError, KeyError, TypeError):
                keep.write(line)
                continue
            if key in drop:
                history.write(line)
                moved += 1
            else:
                keep.write(line)
        history.flush()
        os.fsync(history.fileno())
        keep.flush()
        os.fsync(keep.fileno())
    tmp.replace(paths.results)
    return moved
