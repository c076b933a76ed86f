"""One live invocation per run: an OS lock on ``<results>.lock`` beside the results file
(``results.jsonl.lock``).

Every command that writes into a run directory (``local``, ``harbor``, ``regrade``, with
``--resume``, ``--retry-errors`` or ``--overwrite``) holds the lock while it runs; a second
one is refused in one line naming the holder's process, host and start time.

The lock is ``flock(2)`` on the open lock file, not the file's existence: the kernel drops
it when its holder dies, however it dies (SIGKILL, OOM, a lost node), so a requeued job
takes over a dead run at once and a live one is never run twice. The file also records
the holder's pid, host and start, only for the message: it is never trusted to decide.

On NFS, Linux implements ``flock`` with NFS byte-range locks (NLM for v3, the protocol
itself for v4), which every client sees; a lock held by a machine that vanished is freed
when its lease expires (v4, 90 s by default) or its lock manager restarts. A mount with
``nolock`` (or ``local_lock=flock``) keeps locks on one machine only: two hosts can then run
one run at once. Where the file system refuses locks, the run goes on with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from osmo_run.errors import OutputError
from osmo_run.run.writing.runfiles import RunPaths

_RECORD_READ_TRIES = 20
"""How often the holder's record is read before saying it is unreadable: the holder
writes it just after taking the lock, so a reader may see it empty for a moment."""


class RunLocked(OutputError):
    """Another live invocation holds the run (exit 2)."""


def lock_path(paths: RunPaths) -> Path:
    """The lock file of the run whose results file is ``paths.results``: its name plus
    ``.lock`` (never the results file itself, whatever ``--output`` names)."""
    return paths.results.with_name(paths.results.name + ".lock")


@contextlib.contextmanager
def run_locked(paths: RunPaths, what: str = "run") -> Iterator[None]:
    """Hold the run at ``paths`` for this process while inside; create its directory if
    needed (and remove what it created again on leaving when nothing was written there).

    ``what`` names the thing locked in the refusal (``run``, ``regrade``). Raises
    :class:`RunLocked` when another live process holds it, and :class:`OutputError` when
    the lock file cannot be created.
    """
    directory = paths.results.parent
    created = [d for d in (directory, *directory.parents) if not d.exists()]
    path = lock_path(paths)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = _acquire(path, what, paths)
    except OSError as exc:
        raise OutputError(
            f"{paths.results}: cannot create the run's directory or its lock file {path.name} "
            f"({exc.strerror}); give --output a path in a directory that can be created"
        ) from None
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                if path.stat(follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                    path.unlink()  # while held: a waiter that opened it sees another inode
            os.close(fd)  # releases the lock
        with contextlib.suppress(OSError):  # a run refused before it wrote anything
            for made in created:  # leaf first; rmdir fails on the first one not empty
                made.rmdir()


def _acquire(path: Path, what: str, paths: RunPaths) -> int | None:
    """The open, locked lock file at ``path`` with this process's record written; ``None``
    (after a warning) when the file system cannot lock. Raises :class:`RunLocked`."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    while True:
        fd = os.open(path, flags, 0o600)  # never through a symlink: it could aim anywhere
        try:
            _check_is_lock_file(fd, path, paths)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OutputError:
            os.close(fd)
            raise
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunLocked(_refusal(path, what, paths)) from None
            print(
                f"warning: {path}: the file system cannot lock ({exc.strerror}), so nothing "
                f"stops a second invocation of this {what}; make sure only one runs",
                file=sys.stderr,
            )
            return None
        try:
            same = os.fstat(fd).st_ino == path.stat().st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed this file as it released it: lock the new one
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    return fd


_RECORD_KEYS = frozenset({"pid", "host", "started"})


def _check_is_lock_file(fd: int, path: Path, paths: RunPaths) -> None:
    """Raise :class:`OutputError` unless the open file ``fd`` is empty or an osmo-run lock
    record: a dataset or another file that happens to sit at the lock's path must never
    be overwritten (nor removed)."""
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode):
        if info.st_size == 0:
            return
        try:
            record = json.loads(os.pread(fd, 4096, 0))
            if isinstance(record, dict) and record.keys() >= _RECORD_KEYS:
                return
        except ValueError:
            pass
    raise OutputError(
        f"{path}: exists and is not an osmo-run lock file, which {paths.results} needs "
        "there; move it away, or give --output another name"
    )


def _refusal(path: Path, what: str, paths: RunPaths) -> str:
    """The line refusing a second invocation, naming the holder from its record."""
    holder = "its record is unreadable"
    for _ in range(_RECORD_READ_TRIES):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            holder = (
                f"pid {int(record['pid'])} on {str(record['host'])[:255]}, "
                f"started {str(record['started'])[:40]}"
            )
            break
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.05)
    return (
        f"{paths.results}: another osmo-run invocation is running this {what} ({holder}); "
        "wait for it to end or stop it, then run this command again"
    )


def held_by_another(path: Path) -> bool:
    """Whether a live invocation other than this open file's holder holds the lock file at
    ``path`` (a missing file is held by nobody: its holder removed it as it ended). Used
    to tell a live run's containers from a dead one's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)
    return False
