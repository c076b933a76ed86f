"""No file a command writes may be a file it reads, or another file it writes.

``--output data.jsonl --overwrite`` would truncate the dataset it is about to read; a
``--junit-xml`` naming the results file would replace the results with XML; a regrade into
the run it reads would delete that run. Two paths name one file when they resolve to the
same place (relative paths, ``..``, symbolic links) or, for files that exist, when they
are the same inode (a hard link). Checked before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from osmo_run.errors import OutputError
from osmo_run.run.writing.runfiles import RunPaths

Named = tuple[str, Path | None]
"""What a path is for (``"--output"``, ``"the dataset"``) and the path; ``None``: not given."""


def check_no_aliases(reads: Iterable[Named], writes: Iterable[Named]) -> None:
    """Raise :class:`OutputError` naming both when a path of ``writes`` is the same file as
    a path of ``reads`` or as an earlier path of ``writes``. Creates and changes nothing."""
    read = [(what, path) for what, path in reads if path is not None]
    written: list[tuple[str, Path]] = []
    for what, path in writes:
        if path is None:
            continue
        for other_what, other in read:
            if _same_file(path, other):
                raise OutputError(
                    f"{what} {path}: is {other_what} ({other}), which this command reads; "
                    "writing it would destroy it: give another path"
                )
        for other_what, other in written:
            if _same_file(path, other):
                raise OutputError(
                    f"{what} {path}: is also {other_what} ({other}); one would overwrite the "
                    "other: give each its own path"
                )
        written.append((what, path))


def run_files(paths: RunPaths, label: str) -> list[Named]:
    """The files of the run at ``paths`` (results, summary, manifest, attempts, turns), each named
    ``label`` with what it is (``"--output"`` for the results: ``"--output's summary"``)."""
    return [
        (label, paths.results),
        (f"{label}'s summary", paths.summary),
        (f"{label}'s manifest", paths.manifest),
        (f"{label}'s attempts file", paths.attempts),
        (f"{label}'s turns file", paths.turns),
    ]


def _same_file(first: Path, second: Path) -> bool:
    if _resolved(first) == _resolved(second):
        return True
    try:
        return first.samefile(second)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def _resolved(path: Path) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):  # a symlink loop: compare it as written
        return path.absolute()
