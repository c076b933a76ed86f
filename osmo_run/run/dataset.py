"""Stream a JSONL dataset into :class:`ExecutionRequest` objects.

Two row styles are accepted:

* osmosis columns: ``user_prompt`` (and optional ``system_prompt``), ``ground_truth`` or
  ``label``, ``metadata`` (an object or a JSON string of one);
* chat: ``messages`` or ``prompt`` (a message list, or a string for one user message),
  plus ``label``.

Columns that say different things are refused rather than one chosen silently: two of
``messages``/``prompt``/``user_prompt``, ``system_prompt`` without ``user_prompt``,
``label`` and ``ground_truth`` with different values, an extra column and a ``metadata``
key of the same name with different values. An empty prompt (``""`` or ``[]``) is refused.

An optional ``id`` names the row; otherwise its line number does. Other columns are
kept in the row's metadata. Blank lines are skipped. Reading never holds more than one
line in memory, except the set of explicit ids used to refuse duplicates.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmo_run.errors import DatasetError
from osmo_run.run.seen import SeenHashes
from osmo_run.sdk.types import ExecutionRequest

_KNOWN = frozenset(
    {
        "id",
        "messages",
        "prompt",
        "user_prompt",
        "system_prompt",
        "label",
        "ground_truth",
        "metadata",
    }
)
_MAX_ID_LENGTH = 128


@dataclass
class DatasetRow:
    """One selected line: ``request`` when it parsed, else ``error`` (file:line: reason)."""

    index: int
    line: int
    row_id: str
    request: ExecutionRequest | None
    error: str | None = None
    explicit_id: bool = False
    """The row's ``id`` column named it (otherwise its line number did)."""


class _RowError(ValueError):
    pass


def _check_id(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _RowError(f"'id' must be a string or an integer, got {type(value).__name__}")
    row_id = str(value)
    if (
        not row_id
        or row_id in {".", ".."}
        or "/" in row_id
        or "\\" in row_id
        or "\x00" in row_id
        or len(row_id) > _MAX_ID_LENGTH
    ):
        raise _RowError(
            f"'id' {row_id[:40]!r} must be 1-{_MAX_ID_LENGTH} characters without '/', '\\' "
            "and not '.' or '..' (it names directories)"
        )
    return row_id


def _messages(value: object, column: str) -> list[dict[str, Any]]:
    if (isinstance(value, str | list)) and not value:  # one rule for "" and []
        raise _RowError(f"'{column}' is empty: give a non-empty list of messages or string")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise _RowError(f"'{column}' must be a non-empty list of messages or a string")
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise _RowError(f'\'{column}[{i}]\' must be an object like {{"role": "user", ...}}')
        if not isinstance(message.get("role"), str):
            raise _RowError(f"'{column}[{i}]' has no string 'role'")
    return value


_PROMPT_COLUMNS = ("messages", "prompt", "user_prompt")


def _prompt(obj: dict[str, Any]) -> list[dict[str, Any]]:
    given = [column for column in _PROMPT_COLUMNS if column in obj]
    if len(given) > 1:
        raise _RowError(f"'{given[0]}' and '{given[1]}' both give the prompt: keep one of them")
    if given and given[0] != "user_prompt":
        if "system_prompt" in obj:
            raise _RowError(
                f"'system_prompt' goes with 'user_prompt'; with '{given[0]}', put the system "
                "message in it"
            )
        return _messages(obj[given[0]], given[0])
    user = obj.get("user_prompt")
    if user is None:
        raise _RowError("row has no prompt: give 'messages', 'prompt' or 'user_prompt'")
    if not isinstance(user, str):
        raise _RowError(f"'user_prompt' must be a string, got {type(user).__name__}")
    if not user:
        raise _RowError("'user_prompt' is empty: give a non-empty string")
    system = obj.get("system_prompt")
    if system is not None and not isinstance(system, str):
        raise _RowError(f"'system_prompt' must be a string, got {type(system).__name__}")
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user})
    return messages


def _shown(value: Any) -> str:
    return repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if isinstance(metadata, str) and metadata.strip():
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            raise _RowError("'metadata' is a string but not a JSON object") from None
    if metadata is None or metadata == "":
        metadata = {}
    if not isinstance(metadata, dict):
        raise _RowError(f"'metadata' must be an object, got {type(metadata).__name__}")
    extra = {k: v for k, v in obj.items() if k not in _KNOWN}
    for key, value in extra.items():
        if key in metadata and metadata[key] != value:
            raise _RowError(
                f"'{key}' is a column and a 'metadata' key with different values "
                f"({_shown(value)} and {_shown(metadata[key])}): keep one of them"
            )
    return {**metadata, **extra} if extra else metadata


def _label(obj: dict[str, Any]) -> Any:
    if "label" in obj and "ground_truth" in obj and obj["label"] != obj["ground_truth"]:
        raise _RowError(
            f"'label' and 'ground_truth' differ ({_shown(obj['label'])} and "
            f"{_shown(obj['ground_truth'])}): give one of them"
        )
    label = obj.get("label", obj.get("ground_truth"))
    return None if label == "" else label


def parse_row(
    obj: object,
    line: int,
    agent_timeout_sec: float | None,
    grader_timeout_sec: float | None,
) -> ExecutionRequest:
    """Turn one decoded JSON line into a request; raise ``ValueError`` saying what is wrong."""
    if not isinstance(obj, dict):
        raise _RowError(f"a row must be a JSON object, got {type(obj).__name__}")
    row_id = _check_id(obj["id"]) if "id" in obj else str(line)
    return ExecutionRequest(
        id=row_id,
        prompt=_prompt(obj),
        label=_label(obj),
        metadata=_metadata(obj),
        agent_timeout_sec=agent_timeout_sec,
        grader_timeout_sec=grader_timeout_sec,
    )


def _lines(path: Path) -> Iterator[tuple[int, str | _RowError]]:
    """Yield ``(line_number, text)``, or the error for a line that is not UTF-8."""
    try:
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                yield number, _decode(number, raw)
    except FileNotFoundError:
        raise DatasetError(f"{path}: dataset file not found") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: is a directory; pass a .jsonl file") from None
    except PermissionError as exc:
        raise DatasetError(f"{path}: cannot read dataset: {exc.strerror}") from None


def _decode(number: int, raw: bytes) -> str | _RowError:
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte-order mark says nothing about the rows
    try:
        return raw.rstrip(b"\r\n").decode("utf-8")  # JSON error columns count on this line
    except UnicodeDecodeError as exc:
        return _RowError(f"not valid UTF-8 (byte {exc.start + 1}); re-encode the file as UTF-8")


class Dataset:
    """A JSONL file read lazily, as often as needed (validation pass, then the run).

    ``limit`` keeps the first N rows. Timeouts are copied into every request.
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
    ) -> None:
        self.path = path
        self._agent_timeout_sec = agent_timeout_sec
        self._grader_timeout_sec = grader_timeout_sec
        self._limit = limit
        self._shard = shard
        self.select = select
        """Row indexes to keep (a smoke subset); ``None`` keeps every row."""

    def content_sha256(self) -> str:
        """The hash of the file's bytes: a run is defined by its data, not its path."""
        digest = hashlib.sha256()
        with open(self.path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest()

    def _selected_lines(
        self, whole_selection: bool = False
    ) -> Iterator[tuple[int, int, str | _RowError]]:
        """``(index, line number, text)`` of every selected non-blank line (see :meth:`rows`)."""
        lines = (
            item for item in _lines(self.path) if not isinstance(item[1], str) or item[1].strip()
        )
        shard = None if whole_selection else self._shard
        for index, (number, text) in enumerate(lines):
            if self._limit is not None and index >= self._limit:
                return
            if shard is not None and index % shard[1] != shard[0] - 1:
                continue
            if self.select is not None and not whole_selection and index not in self.select:
                continue
            yield index, number, text

    def rows(self, whole_selection: bool = False) -> Iterator[DatasetRow]:
        """Yield every selected row, bad ones with ``error`` set, in file order.

        ``index`` counts rows within ``limit``; a shard ``(K, N)`` keeps the rows whose
        index is ``K-1`` modulo ``N`` unless ``whole_selection``.
        """
        for index, number, text in self._selected_lines(whole_selection):
            obj: object = None
            try:
                if isinstance(text, _RowError):
                    raise text
                obj = json.loads(text)
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
                    index, number, str(number), None, f"{self.path}:{number}: {reason}"
                )
            except _RowError as exc:
                row_id = str(obj.get("id", number)) if isinstance(obj, dict) else str(number)
                yield DatasetRow(index, number, row_id, None, f"{self.path}:{number}: {exc}")

    def validate(self, stop_on_error: bool) -> tuple[int, list[str]]:
        """Read every selected row once; return ``(row_count, problems)``.

        Raises :class:`DatasetError` for an empty dataset, duplicate ids, and, when
        ``stop_on_error``, for the first bad row. Problems of recorded bad rows are returned.
        A shard that selects no row of a dataset that has rows is ``(0, [])``: in an array
        job of more shards than rows, the extra jobs succeed with nothing to do.
        """
        count = 0
        problems: list[str] = []
        # Hashes, not ids: ~6 bytes a row instead of ~130 for a dict of ids. An id the table
        # may have seen is a suspect, confirmed (with its lines) in a second pass.
        expected = 0
        seen_ids: SeenHashes | None = None
        numeric_ids: SeenHashes | None = None
        line_named = False
        suspects: set[str] = set()
        bad_lines: set[int] = set()  # recorded bad rows: no id of theirs counts
        for row in self.rows():
            count += 1
            if row.error is not None:
                if stop_on_error:
                    raise DatasetError(
                        f"{row.error}\n(nothing was run; fix the line, or pass --bad-rows record "
                        "to record bad rows as validation errors and run the rest)"
                    )
                problems.append(row.error)
                bad_lines.add(row.line)
                continue
            if not row.explicit_id:
                line_named = True
                continue  # a line-number id is unique; remembering it would cost memory per row
            if seen_ids is None:
                expected = self._line_count()
                seen_ids = SeenHashes(expected)
            if seen_ids.add(hash(row.row_id)):
                suspects.add(row.row_id)
            if row.row_id.isdigit():
                numeric_ids = numeric_ids or SeenHashes(expected)
                numeric_ids.add(int(row.row_id))
        if count == 0:
            if not self._selects_part() or next(self.rows(whole_selection=True), None) is None:
                raise DatasetError(f"{self.path}: the dataset has no rows")
            return 0, problems  # a shard (or subset) with nothing in it: a run of no rows
        if line_named and numeric_ids is not None:
            # An explicit numeric id may equal another row's line number (its implicit id):
            # a second pass that only datasets mixing both kinds of id pay for.
            suspects.update(
                str(line)
                for _, line, row_id, explicit in self._ids(bad_lines)
                if not explicit and line in numeric_ids
            )
        if suspects:
            self._raise_first_duplicate(suspects, bad_lines)
        return count, problems

    def _line_count(self) -> int:
        """How many lines the file has (an upper bound of its rows), read at C speed; 0 when
        it cannot be read (reading its rows says why)."""
        count = 0
        try:
            with open(self.path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    count += chunk.count(b"\n")
        except OSError:
            return 0
        return count + 1

    def _ids(self, bad_lines: set[int]) -> Iterator[tuple[int, int, str, bool]]:
        """``(index, line, id, explicit)`` of each selected row but ``bad_lines``, reading no
        more than its id (the confirming pass of the duplicate check)."""
        for index, number, text in self._selected_lines():
            if isinstance(text, _RowError) or number in bad_lines:
                continue
            try:
                obj = json.loads(text)
                if not isinstance(obj, dict):
                    continue
                explicit = "id" in obj
                yield index, number, _check_id(obj["id"]) if explicit else str(number), explicit
            except (ValueError, RecursionError):  # a bad row: already reported
                continue

    def _selects_part(self) -> bool:
        """Whether a shard or a subset leaves rows of the file out."""
        return self._shard is not None or self.select is not None

    def _raise_first_duplicate(self, suspects: set[str], bad_lines: set[int]) -> None:
        first_line: dict[str, int] = {}
        for _, line, row_id, _ in self._ids(bad_lines):
            if row_id in suspects:
                if row_id in first_line:
                    raise self._duplicate(row_id, first_line[row_id], line)
                first_line[row_id] = line

    def _duplicate(self, row_id: str, first: int, again: int) -> DatasetError:
        return DatasetError(
            f"{self.path}:{again}: duplicate id {row_id!r} (first at line {first}); "
            "ids must be unique"
        )
