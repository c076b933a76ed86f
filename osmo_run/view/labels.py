"""A row's label and prompt, read back from the run's dataset.

The output records hold neither (a workflow never sees the label), so the row page reads
the dataset line the record names (``line``), from the path the manifest recorded, and
only when the file still hashes to the manifest's ``dataset_sha256``: a changed dataset
would show the wrong label. Lines are found through a newline-offset table built once.
"""

from __future__ import annotations

import hashlib
import json
import mmap
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmo_run.run.reading.columns import ColumnMap
from osmo_run.run.reading.rows import parse_row


@dataclass
class DatasetRowView:
    label: Any
    prompt: list[dict[str, Any]]


class DatasetLines:
    """The dataset at ``path``, if it still has the hash ``sha256``."""

    def __init__(self, path: Path, sha256: str | None, columns: ColumnMap | None = None) -> None:
        self.path = path
        self.columns = columns or ColumnMap()
        """The run's column mapping, applied as the run applied it."""
        self.sha256 = sha256
        self._starts: array[int] | None = None
        self.problem: str | None = None

    def _open(self) -> bool:
        if self._starts is not None:
            return True
        if self.problem is not None:
            return False
        try:
            digest = hashlib.sha256()
            starts = array("q", [0])
            with open(self.path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            if self.sha256 and digest.hexdigest() != self.sha256:
                self.problem = f"{self.path} changed since the run: its label is not shown"
                return False
            with (
                open(self.path, "rb") as handle,
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data,
            ):
                at = data.find(b"\n")
                while at >= 0:
                    starts.append(at + 1)
                    at = data.find(b"\n", at + 1)
        except (OSError, ValueError) as exc:
            self.problem = f"{self.path}: the run's dataset cannot be read ({exc})"
            return False
        self._starts = starts
        return True

    def row(self, line: int) -> DatasetRowView | None:
        """The dataset row on ``line`` (1-based), or ``None`` (``problem`` says why)."""
        if not self._open() or self._starts is None:
            return None
        if not 1 <= line < len(self._starts) + 1:
            return None
        start = self._starts[line - 1]
        end = self._starts[line] if line < len(self._starts) else None
        try:
            with open(self.path, "rb") as handle:
                handle.seek(start)
                raw = handle.read(None if end is None else end - start)
            obj = json.loads(raw.removeprefix(b"\xef\xbb\xbf"))
            request = parse_row(self.columns.apply(obj), line, None, None)
        except (OSError, ValueError, KeyError):
            return None
        return DatasetRowView(request.label, request.prompt)
