"""One line appended to a run file whole, or not at all: what the results file and the
turns file share."""

from __future__ import annotations

import contextlib
import errno
import os

from osmo_run.errors import OutputError


def append_line(fd: int, line: str, size: int, failed: str, after: str = "") -> int:
    """Write all of ``line`` and a newline to ``fd`` (a file opened for appending, ``size``
    bytes long) and return its new size; a short write goes on until every byte is out.

    A lone surrogate (a ``\\ud800`` escape in the data) is written back as that JSON
    escape. When a write fails the partial line is cut off again, so every line before
    stays complete and the file stays valid JSONL, and :class:`OutputError` is raised:
    ``failed``, the OS's reason (with a hint to free space when the disk is full), then
    ``after``.
    """
    data = (line + "\n").encode("utf-8", "backslashreplace")
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        with contextlib.suppress(OSError):  # drop the partial line: the file stays valid
            os.ftruncate(fd, size)
        hint = "; free some space" if exc.errno == errno.ENOSPC else ""
        raise OutputError(f"{failed}: {exc.strerror}{hint}{after}") from None
    return size + len(data)
