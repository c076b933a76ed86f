"""Stream a JSONL dataset into :class:`ExecutionRequest` objects.

Rows are read by :func:`osmo_run.run.reading.rows.parse_row` (the row styles and their checks). An
optional ``id`` names the row, any non-empty string or integer; otherwise its line number
does. Ids are unique, and so are their safe names (:mod:`osmo_run.sdk.names`), the names of
their directories. Blank lines are skipped. Reading never holds more than one line in
memory, except a table of id hashes used to refuse duplicates.

Each row is parsed once. The validation pass must read every row before anything runs
(``bad_rows: stop`` refuses the file for one bad row, and duplicate ids are found only
over the whole file), so the choice is to keep its work rather than validate as the stream
runs: with ``keep_rows`` it writes every selected row it parsed, as compact ``marshal``
records, to an unlinked temporary file (:class:`_KeptRows`; bounded, and never in memory),
and :meth:`Dataset.rows` reads them back instead of decoding and checking each row again.
Past the bound, or when the temporary file cannot be written, the rest is read from the
dataset again: slower, the same rows.
"""

from __future__ import annotations

import copy
import hashlib
import json
import marshal
import os
import re
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count as count_from
from pathlib import Path
from typing import Any, Literal

from osmo_run.errors import DatasetError
from osmo_run.run.reading.columns import ColumnMap
from osmo_run.run.reading.readers import (
    DatasetFormat,
    Payload,
    check_csv_header,
    check_parquet_types,
    choose_format,
    columns,
    read,
    row_count_bound,
    where,
)
from osmo_run.run.reading.rows import RowError as _RowError
from osmo_run.run.reading.rows import check_id, loads, parse_row, shown
from osmo_run.run.reading.seen import SeenHashes
from osmo_run.run.reading.selection import RowRanges
from osmo_run.sdk.names import safe_name
from osmo_run.sdk.types import ExecutionRequest

__all__ = ["Dataset", "DatasetRow", "id_clash", "parse_row"]


@dataclass
class DatasetRow:
    """One selected line: ``request`` when it parsed, else ``error`` (file:line: reason)."""

    index: int
    line: int
    row_id: str
    request: ExecutionRequest | None
    error: str | None = None
    explicit_id: bool = False
    """The row's ``id`` column named it, a bad row's too (otherwise its line number did)."""


class Dataset:
    """A dataset file (JSONL, CSV or Parquet; :mod:`osmo_run.run.reading.readers`) read lazily, as
    often as needed (validation pass, then the run).

    ``fmt`` is ``jsonl``, ``csv`` or ``parquet`` (``None``/``auto``: by extension);
    ``columns`` maps the file's columns to the row's roles.
    ``limit`` keeps the first N rows; ``row_ranges``, ``pick``, ``shard`` and ``select``
    narrow the selection as :mod:`osmo_run.run.reading.selection` says. Timeouts are copied into
    every request.
    """

    def __init__(
        self,
        path: Path,
        *,
        agent_timeout_sec: float | None = None,
        grader_timeout_sec: float | None = None,
        limit: int | None = None,
        shard: tuple[int, int] | None = None,
        select: frozenset[int] | None = None,
        fmt: str | None = None,
        columns: ColumnMap | None = None,
        row_ranges: RowRanges | None = None,
        pick: frozenset[int] | None = None,
    ) -> None:
        self.path = path
        self.columns = columns or ColumnMap()
        """Which column plays each role (:mod:`osmo_run.run.reading.columns`)."""
        self.format: DatasetFormat = choose_format(path, fmt)
        self._agent_timeout_sec = agent_timeout_sec
        self._grader_timeout_sec = grader_timeout_sec
        self._limit = limit
        self._shard = shard
        self.select = select
        """Row indexes to keep (a smoke subset); ``None`` keeps every row."""
        self.row_ranges = row_ranges
        """``--rows``: the row indexes to keep; ``None`` keeps every row."""
        self._pick = pick
        self._unit = "line" if self.format == "jsonl" else "row"
        self._total: int | None = None
        self._bad_row_ids: dict[int, str] = {}
        """Bad rows (by line) whose line number a real row has as its id: their names."""
        self._kept: _KeptRows | None = None
        """The selected rows the last validation pass parsed (``keep_rows``)."""
        self._sha256: str | None = None
        """The file's hash, when a validation pass read it (with its line count)."""

    @property
    def pick(self) -> frozenset[int] | None:
        """``--shuffle``: positions among the rows ``row_ranges`` keeps to run, in place of
        ``limit`` (:func:`~osmo_run.run.reading.selection.shuffled_pick`)."""
        return self._pick

    def with_pick(self, pick: frozenset[int] | None) -> Dataset:
        """This dataset's file and selection running the rows at ``pick`` (a new dataset:
        one a plan holds never changes; what it counted of the file is kept)."""
        picked = copy.copy(self)
        picked._pick = pick
        picked._bad_row_ids = dict(self._bad_row_ids)
        picked._kept = None  # rows of another selection
        return picked

    def where(self, number: int) -> str:
        """The position of the row at ``number`` for messages (``file:line``, ``file:row N``)."""
        return where(self.path, self.format, number)

    def content_sha256(self) -> str:
        """The hash of the file's bytes: a run is defined by its data, not its path (read
        once with the line count by a validation pass of a JSONL or CSV file)."""
        if self._sha256 is None:
            self._sha256, _ = _hash_and_count(self.path)
        return self._sha256

    def _row_bound(self) -> int:
        """An upper bound of the rows in the file (:func:`row_count_bound`); for JSONL and
        CSV read in the same pass as the file's hash, which the manifest needs next."""
        if self.format == "parquet":
            return row_count_bound(self.path, self.format)
        try:
            self._sha256, lines = _hash_and_count(self.path)
        except OSError:
            return 0  # reading the rows says why
        return lines + 1

    def _selected_lines(self, whole_selection: bool = False) -> Iterator[tuple[int, int, Payload]]:
        """``(index, number, payload)`` of every selected row (see :meth:`rows` and
        :mod:`osmo_run.run.reading.selection`)."""
        shard = None if whole_selection else self._shard
        ranges, pick = self.row_ranges, self._pick
        eligible = kept = -1
        for index, (number, payload) in enumerate(read(self.path, self.format)):
            if ranges is not None:
                if index > ranges.last:
                    return
                if index not in ranges:
                    continue
            eligible += 1
            if pick is not None:
                if eligible not in pick:
                    continue
            elif self._limit is not None and eligible >= self._limit:
                return
            kept += 1
            if pick is not None and kept == len(pick) - 1:
                ranges = RowRanges(((index, index),))  # the last one drawn: read no further
            if shard is not None and kept % shard[1] != shard[0] - 1:
                continue
            if self.select is not None and not whole_selection and index not in self.select:
                continue
            yield index, number, payload

    def total_rows(self) -> int:
        """How many rows the file has (blank JSONL lines not counted), without parsing one:
        Parquet's metadata, else one pass of the reader."""
        if self._total is None:
            if self.format == "parquet":
                self._total = max(0, row_count_bound(self.path, self.format) - 1)
            else:
                self._total = sum(1 for _ in read(self.path, self.format))
        return self._total

    def eligible_rows(self) -> int:
        """How many rows ``row_ranges`` keeps (all rows without it), before ``limit``,
        ``pick`` and ``shard``: what ``--shuffle`` draws from."""
        total = self.total_rows()
        if self.row_ranges is None:
            return total
        return sum(max(0, min(high, total - 1) - low + 1) for low, high in self.row_ranges.ranges)

    def rows(self, whole_selection: bool = False) -> Iterator[DatasetRow]:
        """Yield every selected row, bad ones with ``error`` set, in file order.

        ``index`` is the row's place in the file (from 0: results' ``row_index``). A shard
        ``(K, N)`` keeps every N-th row of the selection from the K-th (all rows selected:
        those whose index is ``K-1`` modulo ``N``), and ``select`` its subset, unless
        ``whole_selection``.

        After ``validate(keep_rows=True)``, the selected rows are those it parsed, read
        back from where it kept them (the same rows, bad ones named as validation named
        them).
        """
        kept = None if whole_selection else self._kept
        after = -1
        if kept is not None:
            for index, line, row_id, explicit, error, fields in kept:
                after = index
                if fields is None:
                    name = row_id if explicit else self._line_id(line)
                    yield DatasetRow(index, line, name, None, error, explicit_id=explicit)
                    continue
                prompt, label, metadata = fields
                request = ExecutionRequest(
                    row_id,
                    prompt,
                    label,
                    metadata,
                    self._agent_timeout_sec,
                    self._grader_timeout_sec,
                )
                yield DatasetRow(index, line, row_id, request, None, explicit)
            if kept.complete:
                return
        yield from self._parsed_rows(whole_selection, after)

    def _parsed_rows(self, whole_selection: bool, after: int = -1) -> Iterator[DatasetRow]:
        """:meth:`rows` read from the file and parsed, from the row past index ``after``."""
        for index, number, payload in self._selected_lines(whole_selection):
            if index <= after:
                continue
            obj: object = None
            try:
                obj = self.columns.apply(_decoded(payload))
                request = parse_row(obj, number, self._agent_timeout_sec, self._grader_timeout_sec)
                explicit = isinstance(obj, dict) and "id" in obj
                yield DatasetRow(index, number, request.id, request, explicit_id=explicit)
            except (json.JSONDecodeError, RecursionError) as exc:
                reason = (
                    f"not valid JSON ({exc.msg}, column {exc.colno})"
                    if isinstance(exc, json.JSONDecodeError)
                    else "JSON nested too deeply"
                )
                yield DatasetRow(
                    index, number, self._line_id(number), None, f"{self.where(number)}: {reason}"
                )
            except _RowError as exc:
                own = _own_id(obj)
                yield DatasetRow(
                    index,
                    number,
                    self._line_id(number) if own is None else own,
                    None,
                    f"{self.where(number)}: {exc}",
                    explicit_id=own is not None,
                )

    def validate(self, stop_on_error: bool, keep_rows: bool = False) -> tuple[int, list[str]]:
        """Read every selected row once; return ``(row_count, problems)``. With
        ``keep_rows``, keep what was parsed for :meth:`rows` (see the module docstring).

        Raises :class:`DatasetError` for an empty dataset, duplicate ids, two ids of one
        safe name (:func:`~osmo_run.sdk.names.safe_name`), and, when
        ``stop_on_error``, for the first bad row. Problems of recorded bad rows are returned.
        Ids are checked over every row a whole run would select, also for a shard or a
        subset: two shards must never each run a row of one id (bad rows are each shard's
        own: a shard stops on its own, loudly). A shard that selects no row
        of a dataset that has rows is ``(0, [])``: in an array job of more shards than
        rows, the extra jobs succeed with nothing to do.

        Afterwards a recorded bad row whose id would be its line number while a row of the
        file has that id is named by :meth:`rows` ``line-N`` (``row-N`` for CSV and
        Parquet; ``line-N-2``, … when that is taken too): no bad row takes a real one's id.
        """
        self.check_columns()
        count = 0
        problems: list[str] = []
        whole = self._selects_part()  # ids over the whole selection: a pass more
        # the bound sizes the id tables; a Parquet footer may claim any count (10**12 rows
        # once asked for terabytes), so past a million rows the tables grow as rows arrive
        table = _IdTable(min(self._row_bound(), _ID_TABLE_ROWS))
        self._kept = None  # read the file, not what an earlier pass kept
        kept = _KeptRows() if keep_rows else None
        for row in self._parsed_rows(whole_selection=False):
            count += 1
            if kept is not None:
                kept.add(row)
            if row.error is not None:
                if stop_on_error:
                    raise _stops_the_run(row.error)
                problems.append(row.error)
            if not whole:
                table.add(row)
        self._check_ranges()
        if count == 0 and (
            not self._selects_part() or next(self.rows(whole_selection=True), None) is None
        ):
            raise DatasetError(f"{self.path}: the dataset has no rows")
        if whole:
            for row in self.rows(whole_selection=True):
                table.add(row)  # another shard's bad row is that shard's to stop on
        self._check_ids(table)
        if kept is not None and kept.close_writing():
            self._kept = kept
        return count, problems

    def check_columns(self) -> None:
        """Refuse a file whose columns (a CSV header, a Parquet schema) cannot be read as
        rows: a CSV whose first line names none of the columns read is data, not a header."""
        names = columns(self.path, self.format)
        if names is None:
            return
        if not self.columns.is_empty():
            try:
                self.columns.check_columns(str(self.path), names)
            except _RowError as exc:
                raise DatasetError(str(exc)) from None
        elif self.format == "csv":
            check_csv_header(self.path, names)
        if self.format == "parquet":
            check_parquet_types(self.path, self.columns.role_columns())

    def _id_rows(self) -> Iterator[tuple[int, str, _IdKind]]:
        """``(line, id, kind)`` of every row a whole run selects (the confirming passes of
        the id check; see :class:`_IdTable`)."""
        for row in self.rows(whole_selection=True):
            yield row.line, row.row_id, _kind(row)

    def _selects_part(self) -> bool:
        """Whether a shard or a subset leaves rows of the file out."""
        return self._shard is not None or self.select is not None

    def _check_ranges(self) -> None:
        """Refuse ``--rows`` naming a row past the end of the file (a typo, or the wrong
        file): running fewer rows than asked for would pass unnoticed."""
        if self.row_ranges is None:
            return
        total = self.total_rows()
        if self.row_ranges.last >= total:
            where = f"indexes 0-{total - 1}" if total else "none"
            raise DatasetError(
                f"{self.path}: --rows {self.row_ranges} names row {self.row_ranges.last}, but "
                f"the file has {total} rows ({where}; rows are counted from 0)"
            )

    def _check_ids(self, table: _IdTable) -> None:
        """Raise :class:`DatasetError` for the first id (or safe name) two rows share; name
        the bad rows whose line number a real row has as its id (see :meth:`validate`).
        Rows are read again only to confirm what ``table`` suspects."""
        suspects = set(table.suspects)
        numeric = table.numeric
        if table.line_named and numeric is not None:
            # An explicit numeric id may equal another row's line number (its implicit id):
            # a pass that only datasets mixing both kinds of id pay for.
            suspects.update(
                str(line)  # a line number is its own safe name
                for line, _, kind in self._id_rows()
                if kind == "line" and line in numeric
            )
        clashing = {line for line in table.bad_lines if numeric is not None and line in numeric}
        if not suspects and not clashing:
            return
        first: dict[str, tuple[str, int]] = {}
        taken: set[str] = set()  # real ids a bad row's name might have taken
        for line, row_id, kind in self._id_rows():
            if kind == "bad":
                continue
            name = safe_name(row_id)
            if name in suspects:
                if name in first:
                    raise self._duplicate(row_id, line, *first[name])
                first[name] = (row_id, line)
            if kind == "explicit" and clashing and _names_a_line(name, self._unit, clashing):
                taken.add(name)
        for line in sorted(clashing):
            if str(line) in taken:
                candidates = (
                    f"{self._unit}-{line}" + ("" if k == 1 else f"-{k}") for k in count_from(1)
                )
                self._bad_row_ids[line] = next(c for c in candidates if c not in taken)

    def _duplicate(self, row_id: str, again: int, first_id: str, first: int) -> DatasetError:
        return DatasetError(id_clash(self.where(again), row_id, first_id, f"{self._unit} {first}"))

    def _line_id(self, number: int) -> str:
        """The id of the bad row at ``number`` that has no valid id of its own: its line
        number, unless a real row has that id (then the name :meth:`validate` chose)."""
        return self._bad_row_ids.get(number, str(number))


def _hash_and_count(path: Path) -> tuple[str, int]:
    """The SHA-256 of the file's bytes and its count of newlines, in one read."""
    digest = hashlib.sha256()
    lines = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            lines += chunk.count(b"\n")
    return digest.hexdigest(), lines


_KEPT_MAX_BYTES = 256 << 20
"""The most bytes of parsed rows a validation pass keeps on disk (a million short rows
take about 80 MB); the rows past it are read from the dataset again."""
_KEPT_BATCH = 1024
"""The most rows written or read at once (a Parquet batch's)."""
_KEPT_BATCH_BYTES = 1 << 20
"""About the most bytes of rows written or read at once: batches start at one row and
grow while their rows are small, so rows of megabytes are kept one at a time."""

KeptRow = tuple[int, int, str, bool, str | None, tuple[Any, Any, Any] | None]
"""``(index, line, row_id, explicit_id, error, (prompt, label, metadata) or None)``."""


class _KeptRows:
    """Parsed rows on disk: an unlinked temporary file of ``marshal`` records, each a batch
    of :data:`_KEPT_BATCH` rows (``marshal`` reads back exactly the values it wrote, several
    times faster than ``json`` parses them, and there is no row check to repeat). Written
    by one validation pass, then read by every :meth:`Dataset.rows` after it, each reader
    with offsets of its own.

    Past :data:`_KEPT_MAX_BYTES` no more rows are kept (``complete`` turns false: the rest
    is read from the dataset); once writing fails (a full disk, a value ``marshal`` cannot
    hold) ``broken`` says nothing kept may be used."""

    def __init__(self) -> None:
        self._file: Any = None
        self._batch: list[KeptRow] = []
        self._batch_rows = 1
        """Rows in the next batch (see :data:`_KEPT_BATCH_BYTES`)."""
        self._size = 0
        self.complete = True
        self.broken = False

    def add(self, row: DatasetRow) -> None:
        """Keep ``row`` (unless no more are kept: see the class docstring)."""
        request = row.request
        fields = None if request is None else (request.prompt, request.label, request.metadata)
        batch = self._batch
        batch.append((row.index, row.line, row.row_id, row.explicit_id, row.error, fields))
        if len(batch) >= self._batch_rows:
            self._write_batch()

    def _write_batch(self) -> None:
        batch, self._batch = self._batch, []
        if not self.complete or self.broken or not batch:
            return
        try:
            record = marshal.dumps(batch)
        except ValueError:  # a value marshal cannot hold: the rows are parsed again
            self.broken = True
            return
        if self._size + 4 + len(record) > _KEPT_MAX_BYTES:
            self.complete = False
            return
        fitting = _KEPT_BATCH_BYTES * len(batch) // len(record)
        self._batch_rows = max(1, min(_KEPT_BATCH, 2 * len(batch), fitting))
        data = len(record).to_bytes(4, "little") + record
        try:
            if self._file is None:
                # open while the dataset lives (rows() may be read again); closed with it
                self._file = tempfile.TemporaryFile(prefix="osmo-run-rows-")  # noqa: SIM115
                weakref.finalize(self, self._file.close)
            view = memoryview(data)
            while view:
                view = view[os.write(self._file.fileno(), view) :]
        except OSError:
            self.broken = True
        self._size += len(data)

    def close_writing(self) -> bool:
        """Write what is pending; whether the rows kept can be read back."""
        self._write_batch()
        return not self.broken

    def __iter__(self) -> Iterator[KeptRow]:
        """Every row kept, in the order kept."""
        offset = 0
        while offset < self._size:
            fd = self._file.fileno()
            length = int.from_bytes(os.pread(fd, 4, offset), "little")
            yield from marshal.loads(os.pread(fd, length, offset + 4))
            offset += 4 + length


_ID_TABLE_ROWS = 1 << 20
"""The most rows the id tables are sized for up front (about 6 MB); more grow them."""

_IdKind = Literal["explicit", "line", "bad"]
"""How a row got its id: its ``id`` column (a bad row's own valid id too), its line number
(a good row without an ``id``), or its line number as a bad row without a valid id (which
gives way to a real row of that id)."""


def _kind(row: DatasetRow) -> _IdKind:
    if row.explicit_id:
        return "explicit"
    return "line" if row.error is None else "bad"


@dataclass
class _IdTable:
    """What one pass over the rows learns about their ids, in memory independent of the
    ids' length: a hash table of explicit ids' safe names (``suspects``: names it may have
    seen twice), one of the numeric ones (which a line number may equal), and the lines of
    bad rows named by their line number."""

    expected: int
    seen: SeenHashes | None = None
    numeric: SeenHashes | None = None
    line_named: bool = False
    suspects: set[str] = field(default_factory=set)
    bad_lines: set[int] = field(default_factory=set)

    def add(self, row: DatasetRow) -> None:
        kind = _kind(row)
        if kind == "line":
            self.line_named = True  # a line-number id is unique; remembering it costs memory
            return
        if kind == "bad":
            self.bad_lines.add(row.line)
            return
        # Hashes of safe names, not ids: ~6 bytes a row instead of ~130 for a dict of ids;
        # the same id has the same name, so this finds both kinds of clash.
        if self.seen is None:
            self.seen = SeenHashes(self.expected)
        name = safe_name(row.row_id)
        if self.seen.add(hash(name)):
            self.suspects.add(name)
        if name.isascii() and name.isdigit():  # the name is the id: like a line number's
            self.numeric = self.numeric or SeenHashes(self.expected)
            self.numeric.add(int(name))


def _names_a_line(name: str, unit: str, lines: set[int]) -> bool:
    """Whether ``name`` is one a bad row at one of ``lines`` may be given: the line's
    number, ``<unit>-<line>`` or ``<unit>-<line>-<k>``."""
    if name.isascii() and name.isdigit():
        return len(name) < 20 and int(name) in lines
    match = re.fullmatch(rf"{unit}-(\d{{1,19}})(?:-\d{{1,19}})?", name)
    return match is not None and int(match.group(1)) in lines


def _stops_the_run(error: str) -> DatasetError:
    """The error of a bad row that stops the run (``--bad-rows stop``)."""
    return DatasetError(
        f"{error}\n(nothing was run; fix the line, or pass --bad-rows record to record bad "
        "rows as validation errors and run the rest)"
    )


def id_clash(at: str, row_id: str, first_id: str, first: str) -> str:
    """The message for the row at ``at`` (``file:line``) whose id, or its safe name, is that
    of the row ``first_id`` at ``first`` (``line 3``, ``row 3``)."""
    if row_id == first_id:
        return f"{at}: duplicate id {shown(row_id)} (first at {first}); ids must be unique"
    return (
        f"{at}: id {shown(row_id)} and id {shown(first_id)} ({first}) have the same file "
        f"name {safe_name(row_id)!r}; rename one of them"
    )


def _own_id(obj: object) -> str | None:
    """A bad row's own id when it has a valid one; ``None`` when it is recorded under its
    line number (``"id": null`` is not the row ``"None"``, nor ``""`` a name)."""
    if isinstance(obj, dict) and "id" in obj:
        try:
            return check_id(obj["id"])
        except ValueError:  # RowError, or an integer too long to print
            pass
    return None


def _decoded(payload: Payload) -> object:
    """A reader's payload as the row object: JSONL text decoded, a reader's error raised
    (and an integer too long for Python, :func:`~osmo_run.run.reading.rows.loads`)."""
    if isinstance(payload, _RowError):
        raise payload
    return loads(payload) if isinstance(payload, str) else payload
