"""The run's turns file (``<stem>.turns.jsonl`` beside the results, ``llm.capture: tokens``):
one line per rollout that captured model calls, written just before its result line: the
result line commits both, so a run stopped between the two leaves a rollout that ``--resume``
runs again, never a kept result without its turns.

A line is ``{"rollout_id": ..., "turns": [{"model", "finish_reason", "messages",
"prompt_token_ids", "completion_token_ids", "logprobs"}, ...]}``, the turns in call order
(:mod:`osmo_run.sdk.turns`). It is written compact (no spaces after ``,`` and ``:``: a
10,000-token turn's ids take about 7 bytes each) and its logprobs exact, as the endpoint
sent them (Python writes a float's shortest round-trip text, at most 24 bytes): a
trainer's importance ratios need the sampler's own numbers, and rounding them would save
less than the ids already take. A logprob JSON cannot hold (``-inf``, ``NaN``) is written
``null``. Secrets are masked in its string values as in the results file.

``--resume`` never duplicates a rollout's line: opening the file keeps only the lines of
rollouts the results file holds then (the rollouts kept), so a rollout that runs again
writes its one new line (:func:`keep_only_recorded`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from osmo_run.errors import OutputError
from osmo_run.run.writing.appending import append_line

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def turns_line(rollout_id: str, turns: list[dict[str, Any]]) -> str:
    """One line of the turns file (see the module docstring); raises ``ValueError`` or
    ``TypeError`` for a turn JSON cannot hold even with its non-finite numbers nulled."""
    return _encoded(rollout_id, turns)[0]


def _encoded(rollout_id: str, turns: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """:func:`turns_line` and the turns as that line holds them (``turns`` itself unless a
    non-finite number had to be nulled)."""
    try:
        return _ENCODER.encode({"rollout_id": rollout_id, "turns": turns}), turns
    except ValueError:  # -inf or NaN somewhere: nulled, the rest kept as it came
        finite = _finite(turns)
        return _ENCODER.encode({"rollout_id": rollout_id, "turns": finite}), finite


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def keep_only_recorded(turns: Path, results: Path) -> None:
    """Drop from ``turns`` every line whose rollout the ``results`` file does not hold (a
    rollout about to run again, or one whose result line a crash never wrote), a second
    line of one rollout, and a torn last line. Reads each line's rollout id only; streams
    the kept lines to a new file, which replaces ``turns`` atomically, only when something
    is to be dropped."""
    if not turns.is_file() or turns.stat().st_size == 0:
        return
    recorded = _recorded_rollouts(results)

    def kept_lines() -> Iterator[tuple[bytes, bool]]:
        seen: set[str] = set()
        with open(turns, "rb") as handle:
            for raw in handle:
                rollout_id = line_rollout_id(raw) if raw.endswith(b"\n") else None
                if rollout_id is not None and rollout_id in recorded and rollout_id not in seen:
                    seen.add(rollout_id)
                    yield raw, True
                else:
                    yield raw, False

    if all(keep for _, keep in kept_lines()):
        return
    tmp = turns.with_name(turns.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.writelines(raw for raw, keep in kept_lines() if keep)
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(turns)


def _recorded_rollouts(results: Path) -> set[str]:
    """The rollout id of every complete line of ``results`` that has one (a line the
    viewer would call malformed still stands for its rollout: it will not run again)."""
    recorded: set[str] = set()
    if not results.is_file():
        return recorded
    with open(results, "rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                break
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict) and "rollout_id" in record:
                recorded.add(str(record["rollout_id"]))
    return recorded


_PREFIX = b'{"rollout_id":'
"""How every line of a turns file starts (:func:`turns_line` writes the id first)."""

_DECODER = json.JSONDecoder()


def line_rollout_id(raw: bytes) -> str | None:
    """The rollout id a turns-file line starts with, decoded without parsing the rest of
    the line (its arrays may be megabytes); ``None`` for a line that is not one."""
    if not raw.startswith(_PREFIX):
        return None
    head = raw[len(_PREFIX) : len(_PREFIX) + 4096].decode("utf-8", "replace")
    try:
        value, _ = _DECODER.raw_decode(head)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


class TurnsWriter:
    """Appends lines to the turns file at ``path`` (created ``0600`` on the first line:
    a run that captures nothing leaves no file), each reaching the OS before
    :meth:`write` returns, as results do. ``mask`` replaces secrets in a string; the
    line is masked value-wise only when ``occurs`` says a secret may be in it. Raises
    :class:`OutputError` when the file cannot be written."""

    def __init__(
        self,
        path: Path,
        mask: Callable[[Any], Any],
        occurs: Callable[[str], bool],
    ) -> None:
        self.path = path
        self._mask_values = mask
        self._occurs = occurs
        self._fd: int | None = None
        self._size = 0
        self.lines_written = 0
        self.last_line: tuple[int, int] | None = None
        """Where the line :meth:`write` wrote last begins in the file, and its length in
        bytes (its newline included)."""

    def write(self, rollout_id: str, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append ``rollout_id``'s turns as one line, secrets masked; return the turns as
        written (``turns`` itself when no secret was in them and every number was finite,
        else a copy masked, its non-finite numbers ``None``, as the line holds them)."""
        line, turns = _encoded(rollout_id, turns)
        if self._occurs(line):
            line, turns = _encoded(rollout_id, self._mask_values(turns))
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            except OSError as exc:
                message = f"{self.path}: cannot open the turns file: {exc.strerror}"
                raise OutputError(message) from None
            self._size = os.fstat(self._fd).st_size
        failed = f"{self.path}: writing a rollout's turns failed"
        start = self._size
        self._size = append_line(self._fd, line, self._size, failed)
        self.last_line = (start, self._size - start)
        self.lines_written += 1
        return turns

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
