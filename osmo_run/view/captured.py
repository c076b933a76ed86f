"""The captured turns a row page shows under its transcript (``llm.capture: tokens``).

:class:`TurnsFile` finds a rollout's line in the run's turns file
(:mod:`osmo_run.run.writing.turns`) through an index of line offsets by rollout id,
extended with the lines written since it last looked (the file only grows while a run
writes it; a file that shrank, rewritten by ``--resume``, is indexed again): a row page
reads one line, never the whole file. :func:`captured_turns` makes each turn what the
page shows: the token counts at once, the ids and logprobs as one preformatted text each
(one string per turn, not one element per token, so a 10,000-token turn costs the page
one text node inside a closed ``<details>``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmo_run.run.writing.turns import line_rollout_id


@dataclass(frozen=True)
class CapturedTurn:
    """One captured model call as the row page shows it."""

    number: int
    model: str | None
    finish_reason: str | None
    messages: int
    """How many messages the call sent."""
    prompt_tokens: int | None
    completion_tokens: int | None
    prompt_ids: str
    completion_ids: str
    logprobs: str
    mean_logprob: float | None


class TurnsFile:
    """The turns file at ``path``, its lines found by rollout id (see the module
    docstring). Not thread-safe: the caller holds the run's lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offsets: dict[str, tuple[int, int]] = {}
        self._scanned = 0
        self._identity: tuple[int, int] | None = None

    def _refresh(self) -> None:
        try:
            stat = self.path.stat()
        except OSError:
            self._offsets, self._scanned, self._identity = {}, 0, None
            return
        identity = (stat.st_dev, stat.st_ino)
        if identity != self._identity or stat.st_size < self._scanned:  # rewritten
            self._offsets, self._scanned, self._identity = {}, 0, identity
        if stat.st_size == self._scanned:
            return
        with open(self.path, "rb") as handle:
            handle.seek(self._scanned)
            position = self._scanned
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break  # a line still being written: read it next time
                rollout_id = line_rollout_id(raw)
                if rollout_id is not None:
                    self._offsets[rollout_id] = (position, len(raw))
                position += len(raw)
        self._scanned = position

    def turns(self, rollout_id: str) -> list[dict[str, Any]] | None:
        """The captured turns of ``rollout_id``, or ``None`` when the file holds none."""
        self._refresh()
        where = self._offsets.get(rollout_id)
        if where is None:
            return None
        offset, length = where
        try:
            with open(self.path, "rb") as handle:
                handle.seek(offset)
                data = json.loads(handle.read(length))
        except (OSError, ValueError, RecursionError):
            return None
        turns = data.get("turns") if isinstance(data, dict) else None
        return [t for t in turns if isinstance(t, dict)] if isinstance(turns, list) else None


def captured_turns(turns: list[dict[str, Any]]) -> list[CapturedTurn]:
    """What the row page shows of each of ``turns`` (see :class:`CapturedTurn`)."""
    return [_shown(number, turn) for number, turn in enumerate(turns, start=1)]


def _shown(number: int, turn: dict[str, Any]) -> CapturedTurn:
    prompt = _list(turn.get("prompt_token_ids"))
    completion = _list(turn.get("completion_token_ids"))
    logprobs = _list(turn.get("logprobs"))
    numbers = [x for x in logprobs or [] if isinstance(x, int | float) and math.isfinite(x)]
    messages = turn.get("messages")
    return CapturedTurn(
        number=number,
        model=_text(turn.get("model")),
        finish_reason=_text(turn.get("finish_reason")),
        messages=len(messages) if isinstance(messages, list) else 0,
        prompt_tokens=None if prompt is None else len(prompt),
        completion_tokens=None if completion is None else len(completion),
        prompt_ids=_joined(prompt),
        completion_ids=_joined(completion),
        logprobs=_joined(logprobs),
        mean_logprob=sum(numbers) / len(numbers) if numbers else None,
    )


def without_ids(turn: CapturedTurn) -> CapturedTurn:
    """``turn`` with its counts but not its ids and logprobs (the HTML export's)."""
    return dataclasses.replace(turn, prompt_ids="", completion_ids="", logprobs="")


def _list(value: object) -> list[Any] | None:
    return value if isinstance(value, list) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _joined(values: list[Any] | None) -> str:
    return "" if values is None else ",".join(map(str, values))
