"""Which runs the paths given to ``osmo-run view`` hold.

A path is a results file, a run directory, or a folder holding runs, which are found by
their manifests (``<stem>.manifest.json`` beside ``<stem>.jsonl``) up to a few levels
down; a folder is looked at again on every visit of the runs list, so runs started after
the viewer appear. Each run gets a short key for URLs; a URL never names a path.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from osmo_run.errors import InputError
from osmo_run.run.writing.manifest import Manifest, read_manifest
from osmo_run.run.writing.runfiles import RunPaths

_MANIFEST = ".manifest.json"
_MAX_DEPTH = 4
_SKIP_DIRS = {"artifacts", "trials", "node_modules", "__pycache__"}
QUIET_SEC = 300.0
"""A run without a current summary whose files changed within this long is *live*;
quieter than that, it is *incomplete* (crashed, killed, or stopped)."""


@dataclass
class RunEntry:
    """One run: its files, its manifest (``None`` without one) and its URL key."""

    key: str
    paths: RunPaths
    manifest: Manifest | None
    manifest_error: str | None = None
    manifest_stamp: tuple[int, int, int] | None = None
    """The manifest file's (inode, size, mtime) when it was read: another means the run was
    started again (``--overwrite``, ``--resume``) and the manifest is read again."""

    def reread_manifest(self) -> None:
        """Read the manifest again when its file changed since it was read, so a run
        restarted with ``--overwrite`` shows its new start (the first one stayed shown)."""
        stamp = _stamp(self.paths.manifest)
        if stamp == self.manifest_stamp:
            return
        try:
            self.manifest, self.manifest_error = read_manifest(self.paths.manifest), None
        except InputError as exc:
            self.manifest, self.manifest_error = None, str(exc)
        self.manifest_stamp = stamp

    @property
    def name(self) -> str:
        if self.manifest is not None:
            return self.manifest.run_id
        return self.paths.directory.name or str(self.paths.results)

    @property
    def dataset(self) -> str:
        return self.manifest.dataset_name if self.manifest else self.paths.results.stem

    @property
    def dataset_sha256(self) -> str | None:
        value = self.manifest.defining.get("dataset_sha256") if self.manifest else None
        return str(value) if value else None

    @property
    def backend(self) -> str:
        value = self.manifest.defining.get("backend") if self.manifest else None
        return str(value or "?")

    @property
    def pass_threshold(self) -> float:
        info = self.manifest.info if self.manifest else {}
        return float(info.get("pass_threshold", 1.0))

    @property
    def samples_per_row(self) -> int:
        defining = self.manifest.defining if self.manifest else {}
        return int(defining.get("samples_per_row", 1) or 1)

    @property
    def expected(self) -> int | None:
        """Rollouts the run was set to produce, from its manifest."""
        if self.manifest is None:
            return None
        rows = int(self.manifest.defining.get("rows", 0) or 0)
        return rows * self.samples_per_row

    @property
    def started(self) -> datetime | None:
        written = self.manifest.info.get("written_at") if self.manifest else None
        if isinstance(written, str):
            try:
                return datetime.fromisoformat(written)
            except ValueError:
                pass
        try:
            return datetime.fromtimestamp(self.paths.results.stat().st_mtime, UTC)
        except OSError:
            return None

    def state(self, now: float | None = None) -> str:
        """``finished`` (its summary is newer than its start), ``live`` (no current summary,
        files changed lately) or ``incomplete`` (no current summary, quiet)."""
        now = time.time() if now is None else now
        summary = _mtime(self.paths.summary)
        manifest = _mtime(self.paths.manifest)
        results = _mtime(self.paths.results)
        if summary is not None and summary >= max(manifest or 0.0, results or 0.0) - 1.0:
            return "finished"
        last = max(manifest or 0.0, results or 0.0)
        return "live" if now - last < QUIET_SEC else "incomplete"

    def ended(self) -> datetime | None:
        """When the run last wrote a file (its summary when finished)."""
        stamps = [_mtime(p) for p in (self.paths.summary, self.paths.results)]
        known = [s for s in stamps if s is not None]
        return datetime.fromtimestamp(max(known), UTC) if known else None


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "run"


def _find_results(folder: Path, depth: int = 0) -> Iterator[Path]:
    """Results files of the runs under ``folder``, by their manifests."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.endswith(_MANIFEST) and entry.is_file():
            stem = entry.name[: -len(_MANIFEST)]
            # ``--output DIR/example`` writes the results to ``example`` (no extension)
            for results in (folder / f"{stem}.jsonl", folder / stem):
                if results.is_file() and RunPaths(results).manifest.name == entry.name:
                    yield results
                    break
    if depth >= _MAX_DEPTH:
        return
    for entry in entries:
        if (
            entry.is_dir(follow_symlinks=False)
            and entry.name not in _SKIP_DIRS
            and not entry.name.startswith(".")
        ):
            yield from _find_results(folder / entry.name, depth + 1)


@dataclass
class Catalog:
    """The runs under the given paths, by key."""

    roots: list[Path]
    runs: dict[str, RunEntry] = field(default_factory=dict)
    _by_results: dict[Path, str] = field(default_factory=dict)

    @classmethod
    def open(cls, paths: list[Path]) -> Catalog:
        """Raises :class:`InputError` for a path that does not exist or cannot be read, and
        when the paths hold no run at all."""
        for path in paths:
            if not path.exists():
                raise InputError(f"{path}: no such run directory, results file or folder")
            if not os.access(path, os.R_OK):
                raise InputError(f"{path}: cannot be read (permission denied)")
        catalog = cls([p.resolve() for p in paths])
        catalog.rescan()
        if not catalog.runs:
            shown = ", ".join(str(p) for p in paths)
            raise InputError(
                f"{shown}: no osmo-run runs here (looked for results .jsonl files with their "
                "manifests); pass a run directory or a results file"
            )
        return catalog

    def rescan(self) -> None:
        """Add the runs that appeared under the roots since the last scan; read again the
        manifests of runs started again since."""
        for entry in self.runs.values():
            entry.reread_manifest()
        for root in self.roots:
            for results in self._results_under(root):
                self._add(results)

    def _results_under(self, root: Path) -> Iterator[Path]:
        if root.is_file():
            yield root
            return
        try:
            yield RunPaths.locate(root).results
            return
        except InputError:
            pass
        yield from _find_results(root)

    def _add(self, results: Path) -> None:
        results = results.resolve()
        if results in self._by_results:
            return
        paths = RunPaths(results)
        error = None
        stamp = _stamp(paths.manifest)
        try:
            manifest = read_manifest(paths.manifest)
        except InputError as exc:
            manifest, error = None, str(exc)
        base = _slug(manifest.run_id if manifest else paths.directory.name)
        if paths.results.stem != "results":
            base = _slug(f"{base}-{paths.results.stem}")
        key, n = base, 2
        while key in self.runs:
            key, n = f"{base}-{n}", n + 1
        self.runs[key] = RunEntry(key, paths, manifest, error, stamp)
        self._by_results[results] = key

    def get(self, key: str) -> RunEntry | None:
        return self.runs.get(key)

    def comparable(self, entry: RunEntry) -> list[RunEntry]:
        """Other runs of the same dataset (same content hash, else the same name)."""
        return [
            other
            for other in self.runs.values()
            if other.key != entry.key
            and (
                (entry.dataset_sha256 and other.dataset_sha256 == entry.dataset_sha256)
                or (not entry.dataset_sha256 and other.dataset == entry.dataset)
            )
        ]
