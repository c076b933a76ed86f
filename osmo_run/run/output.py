"""The append-only output JSONL: one line per finished row, flushed as it is written."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from types import TracebackType

from osmo_run.errors import OutputError


class OutputWriter:
    """Appends lines to ``path`` (created ``0600``: lines hold conversations).

    Every :meth:`write` reaches the OS before it returns, so a crash loses no finished row.
    ``secrets`` are replaced by ``***`` wherever they appear in a line. Raises
    :class:`OutputError` when the file cannot be opened or written (a full disk included);
    what was written before stays valid, line by line.
    """

    def __init__(self, path: Path, secrets: tuple[str, ...] = ()) -> None:
        self.path = path
        self._secrets = tuple(s for s in secrets if s)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise OutputError(f"{path}: cannot open the output file: {exc.strerror}") from None
        self._fd = fd
        self._size = os.fstat(fd).st_size  # the end of the last complete line
        self.lines_written = 0

    def mask(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    def write(self, line: str) -> None:
        # A lone surrogate (a \ud800 escape in the data) is written back as that JSON escape.
        data = (self.mask(line) + "\n").encode("utf-8", "backslashreplace")
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            with contextlib.suppress(OSError):  # drop the partial line: the file stays valid
                os.ftruncate(self._fd, self._size)
            hint = "; free some space" if exc.errno == errno.ENOSPC else ""
            raise OutputError(
                f"{self.path}: writing a result failed: {exc.strerror}{hint}; every line "
                "written before is complete (--resume continues from there)"
            ) from None
        self._size += len(data)
        self.lines_written += 1

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
