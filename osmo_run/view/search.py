"""Free text over a run's records: the row and rollout ids, every message (prompts, answers,
tool calls and results) and the error messages.

The file is scanned as bytes (memory-mapped) for the text as JSON would spell it, which
finds candidate lines at the speed of a byte search; each candidate is then parsed and
kept only when the text really is in one of those fields (not in a key or a number).
Matching ignores case (a non-ASCII letter matches its upper and lower case forms).
"""

from __future__ import annotations

import json
import mmap
import re
from collections.abc import Iterator
from typing import Any

from osmo_run.view.index import RowIndex


def searchable_strings(record: dict[str, Any]) -> Iterator[str]:
    """The strings of ``record`` that free text searches."""
    for key in ("row_id", "rollout_id", "error_message"):
        value = record.get(key)
        if isinstance(value, str):
            yield value
    for attempt in record.get("attempts") or []:
        if isinstance(attempt, dict) and isinstance(attempt.get("error_message"), str):
            yield attempt["error_message"]
    sample = record.get("sample")
    if isinstance(sample, dict):
        yield from _strings(sample.get("messages"))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def record_matches(record: dict[str, Any], text: str) -> bool:
    needle = text.casefold()
    return any(needle in s.casefold() for s in searchable_strings(record))


def _byte_pattern(spelled: str) -> re.Pattern[bytes]:
    """A case-insensitive pattern over UTF-8 bytes for ``spelled``: ``re.IGNORECASE`` folds
    ASCII only in bytes patterns, so each other cased letter becomes an alternation."""
    parts = []
    for char in spelled:
        forms = {char, char.lower(), char.upper()}
        if char.isascii() or len(forms) == 1:
            parts.append(re.escape(char.encode("utf-8")))
        else:
            parts.append(
                b"(?:" + b"|".join(re.escape(f.encode("utf-8")) for f in sorted(forms)) + b")"
            )
    return re.compile(b"".join(parts), re.IGNORECASE)


def matching_positions(index: RowIndex, text: str) -> set[int]:
    """Positions of the indexed records whose searchable strings contain ``text``."""
    if not text or index.count == 0 or index.indexed_size == 0:
        return set()
    pattern = _byte_pattern(json.dumps(text, ensure_ascii=False)[1:-1])
    candidates: list[int] = []
    cols = index.cols
    with (
        open(index.path, "rb") as handle,
        mmap.mmap(handle.fileno(), index.indexed_size, access=mmap.ACCESS_READ) as data,
    ):
        at = 0
        while match := pattern.search(data, at):
            position = index.position_of_line(match.start())
            if position is None:  # a bad line: skip to its end
                end = data.find(b"\n", match.start())
                at = index.indexed_size if end < 0 else end + 1
                continue
            candidates.append(position)
            at = cols.offset[position] + cols.length[position] + 1
    return {
        position
        for position, record in index.read_many(candidates)
        if isinstance(record, dict) and record_matches(record, text)
    }
