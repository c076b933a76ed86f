"""A line-offset index of one results file, so a page never loads the whole file.

One pass over the file records, for every complete line, where it starts and how long it
is, plus the few values the rows table filters and sorts on (status, error category and
phase, reward, duration, tokens, attempt, row and sample index) in flat ``array`` columns:
about 90 bytes a row. A page then reads only the lines it shows, by offset.

The index is cached on disk (never in the run directory: see :func:`cache_dir`) and kept
current as the file grows: :meth:`RowIndex.refresh` reads only the bytes appended since,
and starts over when the file was replaced or rewritten (``--retry-errors``, a repaired
torn line). Bytes after the last newline are a row still being written (or torn by a
crash): they are counted as ``pending`` and read again next time, never indexed half.
Lines that are not records (garbage, a JSON value of the wrong shape, a record with any
field not as :class:`~osmo_run.run.writing.records.OutputRecord` says, strictly) are kept in
``bad`` with their line number and reason, never fatal.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from array import array
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from osmo_run.run.writing.records import record_problem

STATUSES = ("success", "failure", "cancelled")
PHASES = ("setup", "workflow", "grader")
_STATUS_CODE = {name: code for code, name in enumerate(STATUSES)}
_PHASE_CODE = {name: code for code, name in enumerate(PHASES)}
NAN = math.nan

INDEX_VERSION = 2
"""2: records are validated in every field (1 indexed some that the pages could not show)."""
_MAGIC = b"osmo-run view index\n"
_CHUNK = 1 << 22
_TAIL = 64
"""Bytes before the indexed end compared on refresh: a rewritten file does not match."""
_MAX_BAD_KEPT = 1000
"""Bad lines listed (and cached); more are counted."""
_EXCERPT = 200


def cache_dir() -> Path:
    """Where indexes are cached: ``$OSMO_RUN_CACHE_DIR``, else ``$XDG_CACHE_HOME/osmo-run``,
    else ``~/.cache/osmo-run``; always the ``view-index`` folder in it. Never a run
    directory: the viewer is read-only there (and a run directory may not be writable)."""
    base = os.environ.get("OSMO_RUN_CACHE_DIR")
    if base:
        return Path(base) / "view-index"
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = Path(xdg) if xdg else Path.home() / ".cache"
    return root / "osmo-run" / "view-index"


@dataclass(frozen=True)
class BadLine:
    """A line of the results file that is not a record."""

    line: int
    """1-based line number in the results file."""
    offset: int
    reason: str
    excerpt: str
    """Its first characters, decoded leniently (shown as text)."""


@dataclass
class Columns:
    """One entry per indexed record, in file order. ``NaN`` stands for a missing float,
    ``-1`` for a missing code."""

    offset: array[int] = field(default_factory=lambda: array("q"))
    length: array[int] = field(default_factory=lambda: array("q"))
    line: array[int] = field(default_factory=lambda: array("q"))
    status: array[int] = field(default_factory=lambda: array("b"))
    category: array[int] = field(default_factory=lambda: array("h"))
    phase: array[int] = field(default_factory=lambda: array("b"))
    skipped: array[int] = field(default_factory=lambda: array("h"))
    attempt: array[int] = field(default_factory=lambda: array("i"))
    row_index: array[int] = field(default_factory=lambda: array("q"))
    sample_index: array[int] = field(default_factory=lambda: array("i"))
    reward: array[float] = field(default_factory=lambda: array("d"))
    seconds: array[float] = field(default_factory=lambda: array("d"))
    prompt_tokens: array[float] = field(default_factory=lambda: array("d"))
    completion_tokens: array[float] = field(default_factory=lambda: array("d"))
    model_calls: array[int] = field(default_factory=lambda: array("i"))
    model_sec: array[float] = field(default_factory=lambda: array("d"))

    def arrays(self) -> list[tuple[str, array[Any]]]:
        return [(name, getattr(self, name)) for name in self.__dataclass_fields__]


class _NotARecord(ValueError):
    pass


_I32 = 2**31 - 1
_I64 = 2**63 - 1
_MAX_NAMES = 30_000
_DECODER = json.JSONDecoder()


def _decode(raw: bytes) -> Any:
    """``json.loads(raw)``, through the C scanner directly (the common, clean line), else
    ``json.loads`` itself (for its exact error message, or leading whitespace)."""
    text = raw.decode("utf-8")
    try:
        value, end = _DECODER.scan_once(text, 0)  # type: ignore[attr-defined]  # set in __init__, untyped
    except (StopIteration, ValueError):
        return json.loads(text)
    if end != len(text) and text[end:].strip():
        return json.loads(text)
    return value


def _check_record(record: dict[str, Any]) -> None:
    """Raise :class:`_NotARecord` naming the first field of ``record`` that is not as
    :class:`OutputRecord` says (:func:`record_problem`): a page shows only records it can
    read in every field."""
    problem = record_problem(record)
    if problem is not None:
        raise _NotARecord(f"not an osmo-run record: {problem}")


def _number(value: Any) -> float:
    if type(value) is float:
        return value if value - value == 0 else NAN  # inf - inf and nan - nan are nan
    if type(value) is int:
        return float(value) if -(2**1023) < value < 2**1023 else NAN
    return NAN


def _int(value: Any, default: int, limit: int) -> int:
    if type(value) is not int:
        return default
    return value if -limit <= value <= limit else default


class RowIndex:
    """The index of ``path``; call :meth:`refresh` to (re)read it. Not thread-safe: the
    caller serializes access (the server holds one lock per run)."""

    def __init__(self, path: Path, cache: Path | None = None) -> None:
        self.path = path
        self.cache = cache
        self.cols = Columns()
        self.categories: list[str] = []
        self.skipped_reasons: list[str] = []
        self._category_code: dict[str, int] = {}
        self._skipped_code: dict[str, int] = {}
        self.bad: list[BadLine] = []
        self.bad_count = 0
        self.indexed_size = 0
        self.lines_read = 0
        self.pending = 0
        """Bytes after the last newline: a row being written, or a torn last line."""
        self.file_size = 0
        self.progress = 0
        """Bytes read so far by a :meth:`refresh` in progress (another thread may look)."""
        self.missing = False
        self._identity: tuple[int, int] | None = None
        self._tail = b""
        self._saved_count = -1
        self.generation = 0
        """Bumped whenever the index starts over: cached query results die with it."""

    # ------------------------------------------------------------------ reading

    @property
    def count(self) -> int:
        return len(self.cols.offset)

    def refresh(self) -> bool:
        """Index what was appended since the last call (starting over when the file was
        replaced, truncated or rewritten); return whether anything changed. A missing file
        leaves an empty index with ``missing`` set. Saves to the cache when it grew enough."""
        if self._identity is None and self.cache is not None and self.count == 0:
            self._load_cache()
        try:
            stat = self.path.stat()
        except OSError:
            changed = self.count > 0 or not self.missing
            self._reset()
            self.missing = True
            return changed
        self.missing = False
        self.file_size = stat.st_size
        identity = (stat.st_dev, stat.st_ino)
        changed = False
        with open(self.path, "rb") as handle:
            if (
                identity != self._identity
                or stat.st_size < self.indexed_size
                or not self._tail_matches(handle)
            ):
                if self._identity is not None or self.count:
                    changed = True
                self._reset()
                self._identity = identity
            if stat.st_size > self.indexed_size:
                before = (self.count, self.lines_read, self.pending)
                self._read_from(handle)
                changed = changed or before != (self.count, self.lines_read, self.pending)
            else:
                changed = changed or self.pending != 0
                self.pending = 0
        self._maybe_save()
        return changed

    def _tail_matches(self, handle: Any) -> bool:
        if not self._tail:
            return self.indexed_size == 0
        handle.seek(self.indexed_size - len(self._tail))
        return bool(handle.read(len(self._tail)) == self._tail)

    def _reset(self) -> None:
        self.cols = Columns()
        self.categories, self.skipped_reasons = [], []
        self._category_code, self._skipped_code = {}, {}
        self.bad, self.bad_count = [], 0
        self.indexed_size = self.lines_read = self.pending = 0
        self._identity, self._tail = None, b""
        self.generation += 1

    def _read_from(self, handle: Any) -> None:
        handle.seek(self.indexed_size)
        position = self.indexed_size
        rest = b""
        while chunk := handle.read(_CHUNK):
            data = rest + chunk if rest else chunk
            lines = data.split(b"\n")
            rest = lines.pop()
            rows: list[tuple[Any, ...]] = []
            for raw in lines:
                self.lines_read += 1
                if raw.strip():
                    row = self._row(raw, position)
                    if row is not None:
                        rows.append(row)
                position += len(raw) + 1
            # one extend per column and chunk: far cheaper than 16 appends per row
            for (_, column), values in zip(
                self.cols.arrays(), zip(*rows, strict=True), strict=False
            ):
                column.extend(values)
            self.progress = position
        if position > self.indexed_size:
            handle.seek(max(position - _TAIL, 0))
            self._tail = handle.read(position - max(position - _TAIL, 0))
        self.indexed_size = position
        self.pending = len(rest)

    def _row(self, raw: bytes, offset: int) -> tuple[Any, ...] | None:
        """The column values of one line, or ``None`` (listed in ``bad``) for a bad line."""
        try:
            record = _decode(raw)
            if not isinstance(record, dict) or "row_id" not in record:
                raise _NotARecord("a JSON value, but not an osmo-run record (no row_id)")
            if record.get("status") not in _STATUS_CODE:
                raise _NotARecord(f"status {record.get('status')!r} is not one of {STATUSES}")
            _check_record(record)
            return self._values(record, offset, len(raw))
        except _NotARecord as exc:
            self._bad_line(raw, offset, str(exc))
        except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
            self._bad_line(raw, offset, f"not JSON: {exc}")
        except (TypeError, AttributeError) as exc:
            self._bad_line(raw, offset, f"not an osmo-run record: {exc}")
        return None

    def _bad_line(self, raw: bytes, offset: int, reason: str) -> None:
        self.bad_count += 1
        if len(self.bad) < _MAX_BAD_KEPT:
            excerpt = raw[: _EXCERPT * 4].decode("utf-8", "replace")[:_EXCERPT]
            self.bad.append(BadLine(self.lines_read, offset, reason, excerpt))

    def _code(self, table: list[str], codes: dict[str, int], value: Any) -> int:
        text = str(value)
        code = codes.get(text)
        if code is None:
            if len(table) >= _MAX_NAMES:  # a crafted file: the column holds 16 bits
                raise _NotARecord(f"more than {_MAX_NAMES} distinct error categories or reasons")
            code = codes[text] = len(table)
            table.append(text)
        return code

    def _values(self, record: dict[str, Any], offset: int, length: int) -> tuple[Any, ...]:
        """One row of :class:`Columns`, in its field order."""
        get = record.get
        status = _STATUS_CODE.get(get("status"))  # type: ignore[arg-type]
        if status is None:
            raise _NotARecord(f"status {get('status')!r} is not one of {STATUSES}")
        timings = get("timings") or {}
        usage = get("usage") or {}
        if type(timings) is not dict or type(usage) is not dict:
            raise _NotARecord("'timings' and 'usage' must be objects")
        phase = get("error_phase")
        category = get("error_category")
        skipped = get("grader_skipped")
        seconds = _number(timings.get("total_sec"))
        calls = _int(usage.get("model_calls"), 0, _I32)
        return (
            offset,
            length,
            self.lines_read,
            status,
            -1 if category is None else self._code(self.categories, self._category_code, category),
            _PHASE_CODE.get(phase, -1) if type(phase) is str else -1,
            -1
            if skipped is None
            else self._code(self.skipped_reasons, self._skipped_code, skipped),
            _int(get("attempt"), 1, _I32),
            _int(get("row_index"), 0, _I64),
            _int(get("sample_index"), 0, _I32),
            _number(get("reward")),
            0.0 if seconds != seconds else seconds,
            _number(usage.get("prompt_tokens")) if calls else NAN,
            _number(usage.get("completion_tokens")) if calls else NAN,
            calls,
            _number(usage.get("model_sec")) if calls else NAN,
        )

    def read(self, position: int) -> dict[str, Any]:
        """The record at ``position`` (0-based, file order), parsed again from the file."""
        return json.loads(self.read_raw(position))  # type: ignore[no-any-return]

    def read_raw(self, position: int) -> bytes:
        """The bytes of the record's line (without the newline)."""
        with open(self.path, "rb") as handle:
            handle.seek(self.cols.offset[position])
            return handle.read(self.cols.length[position])

    def read_many(self, positions: list[int]) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(position, record)`` for each of ``positions``, with one open file."""
        with open(self.path, "rb") as handle:
            for position in positions:
                handle.seek(self.cols.offset[position])
                yield position, json.loads(handle.read(self.cols.length[position]))

    def position_of_line(self, offset: int) -> int | None:
        """The record whose line holds byte ``offset``, if it is indexed."""
        from bisect import bisect_right

        position = bisect_right(self.cols.offset, offset) - 1
        if position < 0:
            return None
        end = self.cols.offset[position] + self.cols.length[position]
        return position if offset <= end else None

    # ------------------------------------------------------------------ values

    def category_name(self, code: int) -> str | None:
        return None if code < 0 else self.categories[code]

    # ------------------------------------------------------------------ cache

    @property
    def identity(self) -> tuple[int, int] | None:
        """The indexed file's ``(device, inode)``: a replaced file has another."""
        return self._identity

    def cache_file(self, suffix: str = ".idx") -> Path | None:
        """Where this file's cache with ``suffix`` lives (``None`` without a cache)."""
        if self.cache is None:
            return None
        try:
            name = str(self.path.resolve())
        except OSError:
            return None
        return self.cache / (hashlib.sha256(name.encode()).hexdigest()[:32] + suffix)

    def _maybe_save(self) -> None:
        """Save when the index grew by 5% (or started): a live run is not rewritten per row."""
        grown = self.count - self._saved_count
        if self._saved_count >= 0 and grown < max(1, self._saved_count // 20):
            return
        if self.count == 0 and self.bad_count == 0:
            return
        self.save()

    def save(self) -> None:
        """Write the index to the cache atomically; an unwritable cache is not an error."""
        target = self.cache_file()
        if target is None or self._identity is None:
            return
        header = {
            "version": INDEX_VERSION,
            "source": str(self.path.resolve()),
            "identity": list(self._identity),
            "indexed_size": self.indexed_size,
            "lines_read": self.lines_read,
            "count": self.count,
            "tail": self._tail.hex(),
            "categories": self.categories,
            "skipped": self.skipped_reasons,
            "bad": [asdict(b) for b in self.bad],
            "bad_count": self.bad_count,
            "columns": [[name, a.typecode, a.itemsize] for name, a in self.cols.arrays()],
        }
        blob = json.dumps(header).encode()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
            with open(tmp, "wb") as out:
                out.write(_MAGIC + struct.pack("<Q", len(blob)) + blob)
                for _, column in self.cols.arrays():
                    column.tofile(out)
            tmp.replace(target)
        except OSError:
            return
        self._saved_count = self.count

    def _load_cache(self) -> None:
        """Adopt the cached index when it was made by this version for this very file;
        anything else (absent, stale, foreign, corrupt) means building from scratch."""
        target = self.cache_file()
        if target is None:
            return
        try:
            data = target.read_bytes()
            if not data.startswith(_MAGIC):
                return
            start = len(_MAGIC) + 8
            (size,) = struct.unpack("<Q", data[len(_MAGIC) : start])
            header = json.loads(data[start : start + size])
            stat = self.path.stat()
        except (OSError, ValueError, struct.error):
            return
        fresh = Columns()
        expected = [[name, a.typecode, a.itemsize] for name, a in fresh.arrays()]
        if (
            header.get("version") != INDEX_VERSION
            or header.get("source") != str(self.path.resolve())
            or header.get("columns") != expected
            or tuple(header.get("identity", ())) != (stat.st_dev, stat.st_ino)
            or int(header.get("indexed_size", -1)) > stat.st_size
        ):
            return
        count = int(header["count"])
        view = memoryview(data)[start + size :]
        if len(view) != sum(count * a.itemsize for _, a in fresh.arrays()):
            return
        at = 0
        for _, column in fresh.arrays():
            column.frombytes(view[at : at + count * column.itemsize])
            at += count * column.itemsize
        self.cols = fresh
        self.categories = list(header["categories"])
        self.skipped_reasons = list(header["skipped"])
        self._category_code = {name: i for i, name in enumerate(self.categories)}
        self._skipped_code = {name: i for i, name in enumerate(self.skipped_reasons)}
        self.bad = [BadLine(**b) for b in header["bad"]]
        self.bad_count = int(header["bad_count"])
        self.indexed_size = int(header["indexed_size"])
        self.lines_read = int(header["lines_read"])
        self._tail = bytes.fromhex(header["tail"])
        self._identity = (stat.st_dev, stat.st_ino)
        self._saved_count = count
