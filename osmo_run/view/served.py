"""Which files of a run directory the viewer serves: the ones the run recorded, no others.

A run directory is often a project directory (``--output results.jsonl`` beside ``.env``,
``.git`` and the project's own files), so being inside it is not enough. A path is served
only when, both as requested and as it resolves (symlinks followed), it

* has no component starting with ``.`` (no dot-file or dot-directory, no ``..``), no
  backslash and no NUL, and is relative;
* names a regular file inside the run directory;
* is one of the run's own files: ``<stem>.summary.json``, ``<stem>.manifest.json`` or
  ``<stem>.attempts.jsonl`` (not the results file: the pages show it), ``errors/<name>.txt``,
  or a file under ``artifacts/<name>/``, where ``<name>`` is the safe name of a rollout in
  the results (:func:`osmo_run.run.writing.records.record_safe_name`, the name the runner writes
  under), or a file under a kept trial directory a record names (``backend.trial_dir``).

The names come from the records themselves, read once and then as the file grows.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from osmo_run.run.writing.records import record_safe_name
from osmo_run.run.writing.runfiles import RunPaths
from osmo_run.sdk.types import BackendDetails
from osmo_run.view.files import FileEntry, relative_inside, resolve_inside
from osmo_run.view.index import RowIndex


def _plain_parts(relative: str) -> tuple[str, ...] | None:
    """The components of a requested path, or ``None`` when one is hidden, a way up, or
    the path is absolute or holds a backslash or a NUL."""
    if not relative or "\x00" in relative or "\\" in relative or relative.startswith("/"):
        return None
    parts = PurePosixPath(relative).parts
    if not parts or any(part.startswith(".") for part in parts):
        return None
    return parts


def _lines_holding(index: RowIndex, needle: bytes) -> Iterator[int]:
    """Positions of the indexed records whose line holds ``needle`` (at most 100)."""
    found = 0
    with (
        open(index.path, "rb") as handle,
        mmap.mmap(handle.fileno(), index.indexed_size, access=mmap.ACCESS_READ) as data,
    ):
        at = data.find(needle)
        while at >= 0 and found < 100:
            position = index.position_of_line(at)
            if position is not None:
                found += 1
                yield position
                at = index.cols.offset[position] + index.cols.length[position]
            at = data.find(needle, at + 1)


class ServedFiles:
    """The files of one run the viewer may serve (see the module docstring). Not
    thread-safe: the caller holds the run's lock, as for its index."""

    def __init__(self, paths: RunPaths) -> None:
        self.paths = paths
        stem = paths.results.stem
        self._own = {f"{stem}.summary.json", f"{stem}.manifest.json", f"{stem}.attempts.jsonl"}
        self.rollouts: set[str] = set()
        self.trial_dirs: set[tuple[str, ...]] = set()
        self._generation = -1
        self._read = 0

    def update(self, index: RowIndex) -> None:
        """Learn the names of the records indexed since the last call (all of them again
        when the index started over)."""
        if index.generation != self._generation:
            self.rollouts, self.trial_dirs = set(), set()
            self._generation, self._read = index.generation, 0
        if self._read >= index.count:
            return
        for _, record in index.read_many(list(range(self._read, index.count))):
            self._learn(record)
        self._read = index.count

    def learn(self, record: dict[str, Any]) -> None:
        """Learn the names of one record of the results (the row page's: its own files are
        served without reading the whole file)."""
        self._learn(record)

    def lookup(self, index: RowIndex, relative: str) -> None:
        """Learn enough to answer :meth:`allows` for ``relative``: the records naming its
        rollout (found by a byte search: a page never parses the whole file for one
        file), else every record (older files do not spell out hashed safe names)."""
        parts = _plain_parts(relative)
        name = None
        if parts is not None and len(parts) >= 2 and parts[0] in ("artifacts", "errors"):
            name = parts[1].removesuffix(".txt") if parts[0] == "errors" else parts[1]
        if name is not None and name not in self.rollouts and index.indexed_size:
            try:
                for position in _lines_holding(index, name.encode("utf-8", "surrogatepass")):
                    self._learn(index.read(position))
                    if name in self.rollouts:
                        break
            except (OSError, ValueError):  # the file changed under us: read it all below
                pass
        if not self.allows(relative):
            self.update(index)

    def _learn(self, record: dict[str, Any]) -> None:
        try:
            name = record_safe_name(record)
        except (TypeError, ValueError, OverflowError):
            name = ""
        parts = _plain_parts(name)
        if parts is not None and len(parts) == 1:  # a hostile file's "safe_name": "../x"
            self.rollouts.add(name)
        trial_dir = BackendDetails.from_dict(record.get("backend")).trial_dir
        if trial_dir and "\x00" not in trial_dir:
            path = Path(trial_dir)
            if not path.is_absolute():
                path = self.paths.directory / path
            relative = relative_inside(self.paths.directory, path)
            trial_parts = _plain_parts(relative) if relative else None
            if trial_parts is not None:
                self.trial_dirs.add(trial_parts)

    def allows(self, relative: str) -> bool:
        """Whether ``relative`` (a path inside the run directory, ``/``-separated) is one the
        run recorded, by its name alone (no file system access)."""
        parts = _plain_parts(relative)
        if parts is None:
            return False
        if len(parts) == 1:
            return parts[0] in self._own
        if parts[0] == "artifacts" and len(parts) >= 3 and parts[1] in self.rollouts:
            return True
        if parts[0] == "errors" and len(parts) == 2 and parts[1].endswith(".txt"):
            return parts[1][: -len(".txt")] in self.rollouts
        return any(parts[:end] in self.trial_dirs for end in range(1, len(parts)))

    def resolve(self, relative: str) -> Path | None:
        """The file ``relative`` names when the viewer serves it (as requested and as
        resolved), else ``None``."""
        if not self.allows(relative):
            return None
        target = resolve_inside(self.paths.directory, relative)
        if target is None:
            return None
        resolved = relative_inside(self.paths.directory, target)
        return target if resolved is not None and self.allows(resolved) else None

    def keep(self, entries: list[FileEntry]) -> list[FileEntry]:
        """The ``entries`` (listed under a rollout's folders) that :meth:`resolve` serves."""
        return [entry for entry in entries if self.allows(entry.relative)]
