"""Dataset files as streams of rows: JSONL, CSV and Parquet, one reader each.

A reader yields ``(number, payload)`` for every row in file order, holding one row (JSONL,
CSV) or one record batch of a row group (Parquet) in memory at a time:

* ``number`` is the row's position: its line for JSONL (blank lines are skipped, not
  counted out), its row for CSV and Parquet (1 = the first row after a CSV's header);
* ``payload`` is the row's JSON text (JSONL: decoded only for the rows selected), its
  columns as a dict (CSV: strings; Parquet: Python values, nested columns as dicts and
  lists, dates, times, timestamps, durations, decimals and UUIDs as strings, so every row
  is JSON), or the :class:`~osmo_run.run.reading.rows.RowError` that makes it unreadable.

A file that cannot be read as a whole (not Parquet, no CSV header) raises
:class:`~osmo_run.errors.DatasetError` naming it. The format comes from the file's
extension (``.csv``, ``.parquet``/``.pq``, anything else JSONL) unless one is given.
"""

from __future__ import annotations

import contextlib
import csv
import json
import stat
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, Literal

from osmo_run.errors import BackendUnavailable, DatasetError
from osmo_run.run.reading.rows import KNOWN_COLUMNS, RowError, loads, shown

DatasetFormat = Literal["jsonl", "csv", "parquet"]
FORMATS: tuple[DatasetFormat, ...] = ("jsonl", "csv", "parquet")
_EXTENSIONS: dict[str, DatasetFormat] = {
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
Payload = str | dict[str, Any] | RowError
_PARQUET_BATCH_ROWS = 1024
"""Rows decoded at once from a Parquet row group: the reader's memory, whatever the file."""


def choose_format(path: Path, given: str | None = None) -> DatasetFormat:
    """``given`` (``jsonl``, ``csv``, ``parquet``; ``None`` or ``auto``: by extension)."""
    if given is not None and given != "auto":
        if given not in FORMATS:
            raise DatasetError(f"dataset format {given!r}: choose auto, {', '.join(FORMATS)}")
        return given
    return _EXTENSIONS.get(path.suffix.lower(), "jsonl")


def where(path: Path, fmt: DatasetFormat, number: int) -> str:
    """A row's position for messages: ``file:line`` for JSONL, ``file:row N`` otherwise."""
    return f"{path}:{number}" if fmt == "jsonl" else f"{path}:row {number}"


@contextlib.contextmanager
def _reading(path: Path, fmt: DatasetFormat) -> Iterator[None]:
    """Turn the file system's refusals into one-line dataset errors."""
    try:
        yield
    except FileNotFoundError:
        raise DatasetError(f"{path}: dataset file not found") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: is a directory; pass a .{fmt} file") from None
    except PermissionError as exc:
        raise DatasetError(f"{path}: cannot read dataset: {exc.strerror}") from None


def read(path: Path, fmt: DatasetFormat) -> Iterator[tuple[int, Payload]]:
    """Every row of ``path`` in ``fmt`` (see the module docstring).

    Raises :class:`DatasetError` for a path that is missing, a directory, unreadable, or
    not a regular file: a run reads its dataset more than once (checked, then run, then
    again by ``--resume``), and a pipe (``<(zcat rows.jsonl.gz)``) gives its rows only once.
    """
    with _reading(path, fmt):
        if path.exists() and not path.is_dir() and not stat.S_ISREG(path.stat().st_mode):
            raise DatasetError(
                f"{path}: not a regular file (a pipe or a device); osmo-run reads a dataset "
                "more than once, so write it to a file first (cmd > rows.jsonl)"
            )
        if fmt == "csv":
            yield from _csv_rows(path)
        elif fmt == "parquet":
            yield from _parquet_rows(path)
        else:
            yield from _jsonl_lines(path)


def columns(path: Path, fmt: DatasetFormat) -> list[str] | None:
    """The column names every row has (a CSV header, a Parquet schema's top level);
    ``None`` for JSONL, whose rows each name their own. Raises :class:`DatasetError` for a
    file that cannot be read as ``fmt``."""
    if fmt == "jsonl":
        return None
    with _reading(path, fmt):
        if fmt == "parquet":
            return _parquet_names(path, _parquet_file(path))
        lines = _csv_text(path)
        try:
            return _csv_header(path, csv.reader(lines, strict=True))
        finally:
            lines.close()


def row_count_bound(path: Path, fmt: DatasetFormat) -> int:
    """An upper bound of the rows in ``path`` (lines, or Parquet's row count), cheap to
    get; 0 when the file cannot be read (reading its rows says why)."""
    try:
        if fmt == "parquet":
            return int(_parquet_file(path).metadata.num_rows) + 1
        count = 0
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                count += chunk.count(b"\n")
        return count + 1
    except (OSError, DatasetError, BackendUnavailable):
        return 0


# ---------------------------------------------------------------------------- JSONL


def _jsonl_lines(path: Path) -> Iterator[tuple[int, Payload]]:
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            text = _decode_line(number, raw)
            if isinstance(text, RowError) or text.strip():
                yield number, text


def _decode_line(number: int, raw: bytes) -> str | RowError:
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte-order mark says nothing about the rows
    try:
        return raw.rstrip(b"\r\n").decode("utf-8")  # JSON error columns count on this line
    except UnicodeDecodeError as exc:
        return RowError(f"not valid UTF-8 (byte {exc.start + 1}); re-encode the file as UTF-8")


# ---------------------------------------------------------------------------- CSV

_CSV_FIELD_LIMIT = 1 << 28
"""The longest CSV field read (256 MiB): the csv module's default, 128 KiB, refuses a 1 MB
prompt. The limit is the module's, process-wide; it is only ever raised."""
_JSON_CSV_COLUMNS = frozenset({"messages"})
"""CSV cells that hold JSON (a message list); ``metadata`` is decoded by the row checks."""


def _csv_text(path: Path) -> Generator[str, None, None]:
    """The file's lines as text; bytes that are not UTF-8 become lone surrogates, so one
    bad row is that row's error, not the end of the file."""
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)
    with open(path, "rb") as handle:
        first = True
        for raw in handle:
            if first and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            first = False
            yield raw.decode("utf-8", "surrogateescape")


def _csv_header(path: Path, reader: Any) -> list[str]:
    """The names the first line of ``reader`` gives the columns. Raises
    :class:`DatasetError` for a header that is not valid CSV, names a column twice or
    leaves one unnamed."""
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise DatasetError(f"{path}:1: the header is not valid CSV ({_csv_advice(exc)})") from None
    if header is None:
        raise DatasetError(f"{path}: the dataset has no rows (not even a header line)")
    names = [name.strip() for name in header]
    blank = [i + 1 for i, name in enumerate(names) if not name]
    if blank:
        raise DatasetError(f"{path}:1: header column {blank[0]} has no name; name every column")
    seen: set[str] = set()
    for name in names:  # a set, not names.count: a header of 100,000 columns is read at once
        if name in seen:
            raise DatasetError(f"{path}:1: header names column {shown(name)} twice; rename one")
        seen.add(name)
    return names


def _csv_advice(exc: csv.Error) -> str:
    """The csv module's complaint, said for the person who must fix the file."""
    if "new-line character seen in unquoted field" in str(exc):
        return (
            "a carriage return inside an unquoted field; if the file's line ends are lone "
            "carriage returns (old Mac style), save it with LF or CRLF line ends, else quote "
            "the field"
        )
    return str(exc)


def check_csv_header(path: Path, names: list[str]) -> None:
    """Refuse a header that names none of the standard columns (without a column mapping,
    which is checked by name instead): most likely the file has no header and its first
    row would be read as one."""
    if not KNOWN_COLUMNS & set(names):
        got = ", ".join(shown(name) for name in names[:6])
        raise DatasetError(
            f"{path}:1: the first line should be a header naming the columns, but it names "
            f"none that osmo-run reads ({', '.join(sorted(KNOWN_COLUMNS))}); it has {got}: "
            "add a header line, or map the columns in the spec's dataset section"
        )


def _csv_rows(path: Path) -> Iterator[tuple[int, Payload]]:
    reader = csv.reader(_csv_text(path), strict=True)
    names = _csv_header(path, reader)
    number = 0
    while True:
        number += 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DatasetError(
                f"{path}:row {number} (line {reader.line_num}): not valid CSV "
                f"({_csv_advice(exc)}); "
                "nothing after it can be read reliably: fix the quoting"
            ) from None
        if not cells:
            number -= 1  # a blank line is no row
            continue
        yield number, _csv_row(names, cells)


def _csv_row(names: list[str], cells: list[str]) -> Payload:
    if len(cells) != len(names):
        return RowError(
            f"has {len(cells)} fields but the header has {len(names)}; quote fields that "
            "hold commas"
        )
    row: dict[str, Any] = {}
    for name, cell in zip(names, cells, strict=True):
        try:
            cell.encode("utf-8")
        except UnicodeEncodeError:
            return RowError(f"column {shown(name)} is not valid UTF-8; re-encode the file as UTF-8")
        row[name] = cell
    for name in _JSON_CSV_COLUMNS & row.keys():
        if row[name].strip():
            try:
                row[name] = loads(row[name])
            except RowError as exc:
                return RowError(f"'{name}' in a CSV cell is {exc}")
            except json.JSONDecodeError:
                return RowError(f"'{name}' in a CSV cell must be a JSON list of messages")
            except RecursionError:
                return RowError(f"'{name}' in a CSV cell is JSON nested too deeply")
    return row


# ---------------------------------------------------------------------------- Parquet


def _parquet_file(path: Path) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise BackendUnavailable(
            f"{path}: reading Parquet needs pyarrow: pip install 'osmo-run[parquet]'"
        ) from None
    import pyarrow as pa

    if path.is_dir():
        raise IsADirectoryError(path)
    try:
        return pq.ParquetFile(path, pre_buffer=False)  # no read-ahead of whole row groups
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        if isinstance(exc, FileNotFoundError | PermissionError):
            raise
        raise DatasetError(
            f"{path}: not a Parquet file ({str(exc).splitlines()[0]}); if it holds JSONL or "
            "CSV, name it .jsonl or .csv or pass --dataset-format"
        ) from None


def _parquet_names(path: Path, parquet: Any) -> list[str]:
    """The top-level column names of ``parquet``. Raises :class:`DatasetError` for a name
    given twice: a row holds one value per name, so the other column would be dropped
    silently (a CSV header naming a column twice is refused the same way)."""
    names: list[str] = list(parquet.schema_arrow.names)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise DatasetError(f"{path}: the schema names column {shown(name)} twice; rename one")
        seen.add(name)
    return names


_PARQUET_KINDS = {
    "id": ("text or integers", ("string", "integer")),
    "prompt": ("text or a list of messages", ("string", "list")),
    "messages": ("a list of messages", ("list",)),
    "user_prompt": ("text", ("string",)),
    "system_prompt": ("text", ("string",)),
}
"""What each role's column must hold, and the Arrow type families that can hold it."""


def _family(arrow_type: Any) -> str:
    import pyarrow.types as t

    if t.is_dictionary(arrow_type):  # a pandas categorical: its values are what rows hold
        return _family(arrow_type.value_type)
    if (
        t.is_string(arrow_type)
        or t.is_large_string(arrow_type)
        or t.is_string_view(arrow_type)
        or t.is_null(arrow_type)
    ):
        return "string"  # a column of nulls: every row is checked on its own
    if _is_uuid(arrow_type):
        return "string"  # read as its text (_uuids_as_text)
    if t.is_integer(arrow_type):
        return "integer"
    if (
        t.is_list(arrow_type)
        or t.is_large_list(arrow_type)
        or t.is_fixed_size_list(arrow_type)
        or t.is_list_view(arrow_type)
        or t.is_large_list_view(arrow_type)
    ):
        return "list"
    return str(arrow_type)


def _as_text(arrow_type: Any) -> Any:
    """``arrow_type`` with every date, time, timestamp, duration and decimal in it (nested
    in structs and lists too) as a string: Python's ``datetime`` and ``Decimal`` are not
    JSON, so a row holding them cannot go to a worker process or a Harbor trial. Arrow's
    cast writes ISO 8601 (``2024-01-02 03:04:05.000000``), decimals exactly, durations as
    their count of the column's unit."""
    import pyarrow as pa
    import pyarrow.types as t

    if (t.is_temporal(arrow_type) and not t.is_interval(arrow_type)) or t.is_decimal(arrow_type):
        return pa.string()
    if t.is_struct(arrow_type):
        return pa.struct([field.with_type(_as_text(field.type)) for field in arrow_type])
    if t.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_as_text(arrow_type.value_type)))
    if t.is_large_list(arrow_type):
        return pa.large_list(arrow_type.value_field.with_type(_as_text(arrow_type.value_type)))
    if t.is_fixed_size_list(arrow_type):
        value = arrow_type.value_field.with_type(_as_text(arrow_type.value_type))
        return pa.list_(value, arrow_type.list_size)
    return arrow_type


def _is_uuid(arrow_type: Any) -> bool:
    """Whether ``arrow_type`` is Arrow's ``uuid`` extension (16 bytes a value, which
    pyarrow hands out as :class:`uuid.UUID`)."""
    import pyarrow as pa

    return isinstance(arrow_type, pa.BaseExtensionType) and arrow_type.extension_name == (
        "arrow.uuid"
    )


def _holds_uuid(arrow_type: Any) -> bool:
    """Whether ``arrow_type`` is or holds (in lists, structs, maps) a ``uuid`` column."""
    import pyarrow.types as t

    if _is_uuid(arrow_type):
        return True
    if t.is_dictionary(arrow_type):
        return _holds_uuid(arrow_type.value_type)
    return any(_holds_uuid(arrow_type.field(i).type) for i in range(arrow_type.num_fields))


def _uuids_as_text(value: Any) -> Any:
    """``value`` (a cell as pyarrow gives it) with every :class:`uuid.UUID` in it as its
    canonical text (``12345678-1234-…``): a UUID is not JSON."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list):
        return [_uuids_as_text(item) for item in value]
    if isinstance(value, tuple):  # a map's (key, value) pairs
        return tuple(_uuids_as_text(item) for item in value)
    if isinstance(value, dict):
        return {key: _uuids_as_text(item) for key, item in value.items()}
    return value


def _has_binary(arrow_type: Any) -> bool:
    import pyarrow as pa
    import pyarrow.types as t

    if _is_uuid(arrow_type):
        return False  # read as text (_uuids_as_text)
    if isinstance(arrow_type, pa.BaseExtensionType):  # its values are its storage's
        return _has_binary(arrow_type.storage_type)
    if t.is_dictionary(arrow_type):
        return _has_binary(arrow_type.value_type)
    if (
        t.is_binary(arrow_type)
        or t.is_large_binary(arrow_type)
        or t.is_fixed_size_binary(arrow_type)
        or t.is_binary_view(arrow_type)
    ):
        return True
    return any(_has_binary(arrow_type.field(i).type) for i in range(arrow_type.num_fields))


def check_parquet_types(path: Path, roles: dict[str, str]) -> None:
    """Refuse a Parquet file whose column for a role (``roles``: role -> column name) has
    a type no row of it can be valid in: every row would fail the same way; and a file
    with a binary column (bytes are not text, and not JSON for a worker or a trial)."""
    schema = _parquet_file(path).schema_arrow
    for field in schema:
        if _has_binary(field.type):
            raise DatasetError(
                f"{path}: column {shown(field.name)} is {field.type} in the Parquet schema: bytes "
                "cannot be sent to a workflow; convert the column to strings (base64 or "
                "decoded text), or drop it"
            )
    for role, column in roles.items():
        if role not in _PARQUET_KINDS or column not in schema.names:
            continue
        what, families = _PARQUET_KINDS[role]
        arrow_type = schema.field(column).type
        if _family(arrow_type) not in families:
            raise DatasetError(
                f"{path}: column {shown(column)} is {arrow_type} in the Parquet schema, but the "
                f"{role} must be {what}: convert the column, or map another one"
            )


def _parquet_rows(path: Path) -> Iterator[tuple[int, Payload]]:
    import pyarrow as pa

    parquet = _parquet_file(path)
    _parquet_names(path, parquet)
    schema = parquet.schema_arrow
    text = pa.schema([field.with_type(_as_text(field.type)) for field in schema])
    uuid_columns = [field.name for field in schema if _holds_uuid(field.type)]
    number = 0
    try:
        # one thread: no per-thread arenas, ~15 MiB less at 1M rows; the run is the work
        for batch in parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS, use_threads=False):
            if text != schema:
                batch = batch.cast(text)  # vectorised, one batch at a time
            for row in batch.to_pylist():
                number += 1
                for name in uuid_columns:  # Arrow casts no uuid to text: Python does
                    row[name] = _uuids_as_text(row[name])
                yield number, row
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(
            f"{path}:row {number + 1}: cannot be read ({str(exc).splitlines()[0]}); the file "
            "may be truncated"
        ) from None
