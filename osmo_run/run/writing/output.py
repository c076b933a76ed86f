"""The append-only output JSONL: one line per finished row, flushed as it is written."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

from osmo_run.errors import OutputError
from osmo_run.run.writing.appending import append_line
from osmo_run.run.writing.masking import SecretMask
from osmo_run.run.writing.records import record_line
from osmo_run.run.writing.runfiles import RunPaths
from osmo_run.run.writing.turns import TurnsWriter, keep_only_recorded


def check_writable(path: Path, what: str) -> None:
    """Raise :class:`OutputError` (one line naming ``what`` and ``path``) unless a file can
    be written at ``path``: it is not a directory, and its nearest existing ancestor is a
    directory this process may create entries in. Creates nothing; called before a run
    starts so that a report path cannot fail after the rows ran."""
    if path.is_dir():
        raise OutputError(f"{what} {path}: is a directory; give a file path")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise OutputError(f"{what} {path}: not writable")
        return
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputError(
            f"{what} {path}: {ancestor} is a file, not a directory; give a path in a "
            "directory that can be created"
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {path}: cannot create files in {ancestor}")


_NOT_MASKED = frozenset(
    {
        "schema_version",
        "row_id",
        "rollout_id",
        "safe_name",  # derived from the row id: the name of the rollout's artifacts directory
        "row_index",
        "sample_index",
        "line",
        "attempt",
        "status",
        "error_category",
        "error_phase",
        "timings",
        "usage",
        "total_sec",
    }
)
"""Record fields that hold ids, numbers or a fixed vocabulary, never a secret's text."""

_MASKED_AT_SOURCE = frozenset({"error_message"})
"""Masked by the runner with :meth:`OutputWriter.mask` as soon as a result arrives (the
display prints it before it is recorded); masking it again would mask the mask itself when a
secret is part of ``***``."""


class OutputWriter:
    """Appends lines to ``path`` (created ``0600``: lines hold conversations).

    Every :meth:`write` reaches the OS before it returns, so a crash loses no finished row.
    ``secrets`` are masked by :meth:`record_line` (each of their forms,
    :class:`~osmo_run.run.writing.masking.SecretMask`), inside a record's string values only: a
    line is never masked as text, where a short key (``1``, ``e``) would hit field names,
    numbers and JSON syntax. Raises :class:`OutputError` when the
    file cannot be opened or written (a full disk included); what was written before stays
    valid, line by line.
    """

    def __init__(self, path: Path, secrets: tuple[str, ...] = (), turns: bool = False) -> None:
        self.path = path
        self._mask = SecretMask(secrets)
        self.turns: TurnsWriter | None = None
        """With ``turns``: the run's turns file (:mod:`osmo_run.run.writing.turns`), its
        lines of rollouts the results file does not hold dropped now (``--resume``), its
        secrets masked as the results' are."""
        if turns:
            turns_path = RunPaths(path).turns
            try:
                keep_only_recorded(turns_path, path)
            except OSError as exc:
                raise OutputError(f"{turns_path}: cannot rewrite it: {exc.strerror}") from None
            self.turns = TurnsWriter(turns_path, self.mask_values, self._secret_may_occur)
        self._masked_encoder = json.JSONEncoder(
            ensure_ascii=False, allow_nan=False, default=self._masked_repr
        )
        """Encodes a record whose values are masked already: with the cycle check (this
        is the rare path), and a value JSON cannot hold as its masked ``repr``."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise OutputError(f"{path}: cannot open the output file: {exc.strerror}") from None
        self._fd = fd
        self._size = os.fstat(fd).st_size  # the end of the last complete line
        self.lines_written = 0

    @property
    def secrets(self) -> tuple[str, ...]:
        """The texts masked in what this writer writes (every form of every secret),
        longest first."""
        return self._mask.forms

    def mask(self, text: str) -> str:
        """``text`` with every form of every secret replaced by ``***``."""
        return self._mask(text)

    def mask_values(self, value: Any) -> Any:
        """``value`` (a JSON-like structure) with every secret replaced by ``***`` in each
        string value; keys, numbers and the structure are left as they are."""
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, dict):
            return {key: self.mask_values(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.mask_values(item) for item in value]
        return value

    def mask_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """An output record (or one of its ``attempts``) with secrets masked in the string
        values of its free-text fields: messages, metrics, info, backend diagnostics (error
        messages are masked already, :data:`_MASKED_AT_SOURCE`). The fields osmo-run fills
        from a fixed vocabulary (``status``, ``error_category``, ...) or with numbers, and
        the ids that name the rollout (from the dataset; ``--resume`` and ``report`` match
        rows by them), are left as they are.
        Returns ``record`` itself when there is no secret."""
        if not self._mask:
            return record
        masked: dict[str, Any] = {}
        for key, value in record.items():
            if key == "attempts" and isinstance(value, list):
                value = [self.mask_record(a) if isinstance(a, dict) else a for a in value]
            elif key not in _NOT_MASKED and key not in _MASKED_AT_SOURCE:
                value = self.mask_values(value)
            masked[key] = value
        return masked

    def record_line(self, record: dict[str, Any]) -> str:
        """``record`` serialized as one line (:func:`~osmo_run.run.writing.records.record_line`),
        secrets masked as :meth:`mask_record` masks them.

        Encoded first, and masked only when a secret's escaped form occurs in the line
        (:meth:`~osmo_run.run.writing.masking.SecretMask.occurs_in_json`): then the record's
        values are masked and encoded again, so a short secret never touches a key, a
        number or the JSON syntax. A value JSON cannot hold is written as its ``repr``,
        masked too. Raises what :func:`~osmo_run.run.writing.records.record_line` raises."""
        line = record_line(record)
        if not self._mask or not self._mask.occurs_in_json(line):
            return line
        return self._masked_encoder.encode(self.mask_record(record))

    def _secret_may_occur(self, line: str) -> bool:
        return bool(self._mask) and self._mask.occurs_in_json(line)

    def _masked_repr(self, value: object) -> str:
        """What a value JSON cannot hold is written as, with secrets masked."""
        return self.mask(repr(value))

    def write(self, line: str) -> None:
        """Append ``line`` (one serialized record, already masked) and a newline; raises
        :class:`OutputError` with the file whole up to the line before."""
        self._size = append_line(
            self._fd,
            line,
            self._size,
            f"{self.path}: writing a result failed",
            "; every line written before is complete (--resume continues from there)",
        )
        self.lines_written += 1

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        if self.turns is not None:
            self.turns.close()

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
