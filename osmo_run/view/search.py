"""Free text over a run's records: the row and rollout ids, every message (prompts, answers,
tool calls and results) and the error messages.

The file is scanned as bytes (memory-mapped) for the text as JSON would spell it, which
finds candidate lines at the speed of a byte search; each candidate is then parsed and
kept only when the text really is in one of those fields (not in a key or a number).
Matching ignores case (a non-ASCII letter matches its upper and lower case forms).

Tool-call ``arguments`` are a JSON text inside the record, most often written with
non-ASCII escaped (``\\u00fc``): they are searched for their decoded strings, and the
file is also scanned for the text as such a JSON-in-JSON would spell it.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from collections.abc import Iterator
from pathlib import Path
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


def prompt_strings(prompt: Any) -> Iterator[str]:
    """The strings of a prompt (a list of messages) that free text searches."""
    yield from _strings(prompt)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "arguments" and isinstance(item, str):
                yield from _argument_strings(item)
            else:
                yield from _strings(item)


def _argument_strings(text: str) -> Iterator[str]:
    """A tool call's ``arguments``: the strings of the JSON it holds (what the model
    wrote, unescaped), else the text itself."""
    try:
        decoded = json.loads(text)
    except ValueError:
        yield text
        return
    if isinstance(decoded, str):
        yield decoded
    else:
        yield from _strings(decoded)


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


def _nested_pattern(text: str) -> re.Pattern[bytes]:
    """A case-insensitive pattern for ``text`` as a JSON string inside a JSON string spells
    it (the inner one ASCII-escaped, as ``json.dumps`` writes tool-call arguments)."""
    parts = []
    for char in text:
        forms = sorted({char, char.lower(), char.upper()})
        spelled = {json.dumps(json.dumps(f)[1:-1], ensure_ascii=False)[1:-1] for f in forms}
        parts.append(
            b"(?:" + b"|".join(re.escape(s.encode("utf-8")) for s in sorted(spelled)) + b")"
        )
    return re.compile(b"".join(parts), re.IGNORECASE)


def _escaped_inside_json(text: str) -> bool:
    """Whether a JSON text inside a JSON string spells ``text`` otherwise than the
    record's own strings do (non-ASCII, quotes, backslashes, control characters)."""
    return any(not c.isascii() or c in '"\\' or ord(c) < 0x20 for c in text)


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


def file_mentions(path: Path, text: str) -> bool:
    """Whether the file at ``path`` holds ``text`` as JSON spells it (any case): a byte
    scan, so a search skips parsing a file that cannot match. ``False`` when unreadable."""
    spelled = json.dumps(text, ensure_ascii=False)[1:-1]
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                return False
            with mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ) as data:
                if all(c.isascii() or c.lower() == c.upper() for c in spelled):
                    found = _ascii_offsets(data, size, spelled.encode("utf-8").lower())
                else:
                    found = _regex_offsets(data, size, _byte_pattern(spelled))
                return next(iter(found), None) is not None
    except (OSError, ValueError):
        return False


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
        scans = [offsets]
        if _escaped_inside_json(text):
            scans.append(_regex_offsets(data, size, _nested_pattern(text)))
        for scan in scans:
            for offset in scan:
                position = index.position_of_line(offset)
                if position is not None and (not candidates or candidates[-1] != position):
                    candidates.append(position)
    candidates = sorted(set(candidates))
    return {
        position
        for position, record in index.read_many(candidates)
        if isinstance(record, dict) and record_matches(record, text)
    }
