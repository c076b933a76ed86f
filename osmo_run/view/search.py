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


_BLOCK = 1 << 24


def _ascii_offsets(data: mmap.mmap, size: int, needle: bytes) -> Iterator[int]:
    """Offsets of ``needle`` (lower case) in ``data[:size]`` ignoring ASCII case: each
    block is lower-cased and searched with ``bytes.find`` (both run in C, far faster than
    a case-insensitive regex over the same bytes)."""
    overlap = len(needle) - 1
    start = 0
    while start < size:
        end = min(start + _BLOCK, size)
        block = data[start : min(end + overlap, size)].lower()
        at = block.find(needle)
        while 0 <= at < end - start:
            yield start + at
            at = block.find(needle, at + 1)
        start = end


def _regex_offsets(data: mmap.mmap, size: int, pattern: re.Pattern[bytes]) -> Iterator[int]:
    for match in pattern.finditer(data, 0, size):
        yield match.start()


def matching_positions(index: RowIndex, text: str) -> set[int]:
    """Positions of the indexed records whose searchable strings contain ``text``."""
    if not text or index.count == 0 or index.indexed_size == 0:
        return set()
    spelled = json.dumps(text, ensure_ascii=False)[1:-1]
    candidates: list[int] = []
    with (
        open(index.path, "rb") as handle,
        mmap.mmap(handle.fileno(), index.indexed_size, access=mmap.ACCESS_READ) as data,
    ):
        size = index.indexed_size
        if all(c.isascii() or c.lower() == c.upper() for c in spelled):
            offsets = _ascii_offsets(data, size, spelled.encode("utf-8").lower())
        else:
            offsets = _regex_offsets(data, size, _byte_pattern(spelled))
        for offset in offsets:
            position = index.position_of_line(offset)
            if position is not None and (not candidates or candidates[-1] != position):
                candidates.append(position)
    return {
        position
        for position, record in index.read_many(candidates)
        if isinstance(record, dict) and record_matches(record, text)
    }
