"""The systemic-failure breaker: stop starting rows once they all fail the same way.

When the model endpoint is down, or the container engine cannot start the task's image,
every row fails with the same error, one after another; a 10,000-row run would spend its
whole budget learning one fact. The breaker watches the rollouts in the order they finish
(after their retries): once ``after`` of them in a row (the first ones of the run, or any
stretch later) failed with the same *systemic* category and the same cause, it trips. The
runner then starts no further row, lets the rows already in flight finish and records
them, and the run exits with :attr:`~osmo_run.errors.ExitCode.SYSTEMIC_FAILURE`;
``--resume`` reruns the rollouts that failed with that cause and starts the rest.

Only :data:`SYSTEMIC_CATEGORIES` count: an agent's or a grader's own failure, a validation
error or one row's timeout says something about that row, never about the run, and resets
the count like a success does.

The *cause* of a failure is its category and its message's first line with what differs
from row to row for the same fact masked (:func:`failure_cause`): where the exception was
raised, the retry note, the row's own id, addresses, ids and numbers. Two rows refused by
the same dead endpoint have the same cause; a refused connection and an HTTP 500 do not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from osmo_run.sdk.messages import short_message
from osmo_run.sdk.names import docker_part, safe_name
from osmo_run.sdk.types import ErrorCategory, ExecutionResult, RolloutStatus

DEFAULT_BREAKER_AFTER = 5
"""Rollouts in a row failing the same way that trip the breaker, unless the spec or
``--breaker`` says otherwise."""

SYSTEMIC_CATEGORIES = frozenset(
    {ErrorCategory.INFRA_ERROR, ErrorCategory.MODEL_API_ERROR, ErrorCategory.RATE_LIMIT}
)
"""The categories whose repetition says the run's environment is broken, not a row."""

CAUSE_CHARS = 200
"""The longest cause kept: an HTML error page's first line can be long, and the start of
it is what names the fault."""

_WHERE = re.compile(r"\s*\(at [^()]*:\d+ in [^()]*\)\s*$")
"""``describe_exception``'s "(at file:line in function)": two call sites of one dead
endpoint are one cause."""
_GAVE_UP = re.compile(r"\s*\((?:[^()]*; )?gave up after \d+ tries\)")
"""The model client's retry note (deadline, ``Retry-After``, tries): how long a row kept
trying differs from row to row, the fault does not."""
_ROWS_OWN_STATUS = re.compile(r"\banswered HTTP (?:400|413|422)\b")
"""A model endpoint's verdict on the request's own content (too long for the context, a
malformed message): the row's fault however many rows in a row hit it (a dataset sorted by
length), never the environment's."""
_UUID = r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
_IPV6 = r"\[[0-9a-f:]+\](?::\d+)?|\b(?:[0-9a-f]{1,4}:){2,7}[0-9a-f]{1,4}\b"
_IPV4 = r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"
_TOKEN_ID = r"(?<![0-9A-Za-z])(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[0-9A-Za-z]{6,}(?![0-9A-Za-z])"
"""Six or more letters and digits mixed: hex ids (containers, trials, requests) and the
random names of temporary files (``tmpc40uv3xq``), which differ in every trial."""
_MASKS_BEFORE_IDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(_UUID, re.IGNORECASE), "<id>"),
    (re.compile(_IPV6, re.IGNORECASE), "<addr>"),
    (re.compile(_IPV4), "<addr>"),
)
_MASKS_AFTER_IDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(_TOKEN_ID), "<id>"),
    (re.compile(r"\d+(?:\.\d+)?"), "#"),
)
"""What differs between rows failing for one reason, masked in this order: UUIDs and
addresses with their ports; then the row's own ids (an id ``1`` must not eat an address's
digits first); then ids of letters and digits mixed, and any number."""


def _first_line(message: str) -> str:
    """The first meaningful line of ``message`` (:func:`~osmo_run.sdk.messages.short_message`:
    an HTML page's title, a traceback's last line), without where it was raised and the
    retry note (the fault, as a person reads it)."""
    return _GAVE_UP.sub("", _WHERE.sub("", short_message(message)))


def _mask_id(line: str, rollout_id: str) -> str:
    """``line`` with each whole-word ``rollout_id`` (no letter or digit either side) as
    ``<row>``. By hand, not a regex: a pattern per row id would be compiled for every row."""
    parts: list[str] = []
    start = 0
    while (at := line.find(rollout_id, start)) >= 0:
        end = at + len(rollout_id)
        whole = (at == 0 or not line[at - 1].isalnum()) and (
            end == len(line) or not line[end].isalnum()
        )
        parts += [line[start:at], "<row>"] if whole else [line[start : at + 1]]
        start = end if whole else at + 1
    parts.append(line[start:])
    return "".join(parts)


def _cut(text: str) -> str:
    return text if len(text) <= CAUSE_CHARS else text[: CAUSE_CHARS - 1] + "…"


def failure_cause(
    category: str | None, message: str | None, ids: tuple[str, ...] = ()
) -> str | None:
    """The cause of a failure in a :data:`SYSTEMIC_CATEGORIES` category:
    ``"<category>: <normalised first line of message>"``; ``None`` for any other category
    (or none). ``ids`` (the rollout's and its row's ids) are masked as ``<row>`` first.

    Works on a result's fields and on an output record's alike, so ``--resume`` finds the
    rollouts that failed with the cause that tripped a run.
    """
    if category is None or category not in {c.value for c in SYSTEMIC_CATEGORIES}:
        return None
    line = _first_line(message or "")
    if _ROWS_OWN_STATUS.search(line):
        return None
    for pattern, mask in _MASKS_BEFORE_IDS:
        line = pattern.sub(mask, line)
    line = _mask_ids_outside_urls(line, sorted(_names_of(ids), key=len, reverse=True))
    for pattern, mask in _MASKS_AFTER_IDS:
        line = pattern.sub(mask, line)
    return f"{category}: {_cut(' '.join(line.split()))}"


_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)


def _mask_ids_outside_urls(line: str, names: list[str]) -> str:
    """``line`` with each of ``names`` masked as ``<row>``, except inside URLs: the
    endpoint's URL is the same for every row, and a short id (``v1``, ``chat``) would
    otherwise mask its path in that row's message only."""
    parts: list[str] = []
    start = 0
    for url in _URL.finditer(line):
        parts += [_mask_all(line[start : url.start()], names), url.group()]
        start = url.end()
    parts.append(_mask_all(line[start:], names))
    return "".join(parts)


def _mask_all(text: str, names: list[str]) -> str:
    for name in names:
        text = _mask_id(text, name)
    return text


def _names_of(ids: tuple[str, ...]) -> set[str]:
    """The ids and the names derived from them that messages quote: the safe name (files)
    and its Docker part (Harbor trial and container names). Ids of digits only are left to
    the number mask."""
    names: set[str] = set()
    for given in ids:
        if not given or given.isdigit():
            continue
        safe = safe_name(given)
        names.update((given, safe, docker_part(safe)))
    return names


@dataclass
class BreakerTrip:
    """Why the breaker stopped a run: ``after`` rollouts in a row (``rollouts``, their ids)
    failed with ``category`` and ``cause``; ``message`` is the first line of the last one's
    message as it was written (secrets masked), without its location and retry note.
    ``in_flight`` rollouts were running when it tripped (they finish and are recorded);
    ``not_started`` is set once the run ends."""

    after: int
    category: str
    cause: str
    message: str
    rollouts: list[str] = field(default_factory=list)
    in_flight: int = 0
    not_started: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The summary's ``breaker`` section."""
        return {
            "tripped": True,
            "after": self.after,
            "category": self.category,
            "cause": self.cause,
            "message": self.message,
            "rollouts": self.rollouts,
            "in_flight": self.in_flight,
            "not_started": self.not_started,
        }

    def line(self, unit: str = "rows") -> str:
        """The one line the run ends with: the cause, what was not started, what to do."""
        return (
            f"stopped by the breaker: {self.after} rollouts in a row failed with "
            f"{self.category}: {self.message}; {self.not_started} {unit} not started; fix "
            "the cause, then rerun the same command with --resume (--no-breaker runs every "
            "row regardless)"
        )


def cause_of_trip(summary: dict[str, Any] | None) -> str | None:
    """The cause that stopped the run whose saved summary is ``summary``; ``None`` when it
    was not stopped by the breaker (or the summary is missing or unreadable)."""
    breaker = (summary or {}).get("breaker")
    if isinstance(breaker, dict) and breaker.get("tripped") and breaker.get("cause"):
        return str(breaker["cause"])
    return None


class Breaker:
    """Counts the finished rollouts in a row that failed with one cause; trips at ``after``.

    :meth:`observe` each final result in the order they finish. After the trip it keeps
    answering :meth:`matches` (a row in flight that fails the same way is not retried).
    """

    def __init__(self, after: int = DEFAULT_BREAKER_AFTER) -> None:
        if after < 1:
            raise ValueError(f"the breaker needs at least 1 rollout, got {after}")
        self.after = after
        self.tripped: BreakerTrip | None = None
        self._cause: str | None = None
        self._streak: list[str] = []

    def observe(
        self, result: ExecutionResult, row_id: str, *, in_flight: int = 0
    ) -> BreakerTrip | None:
        """Count ``result`` (a final one); the trip when this result trips the breaker,
        ``None`` otherwise (also for every result after the trip). ``in_flight``: the
        rollouts still running besides this one (the trip says so)."""
        if result.status is RolloutStatus.CANCELLED or self.tripped is not None:
            return None
        cause = self.cause_of(result, row_id)
        if cause is None:
            self._cause, self._streak = None, []
            return None
        if cause != self._cause:
            self._cause, self._streak = cause, []
        self._streak.append(result.rollout_id)
        if len(self._streak) < self.after:
            return None
        category = result.error_category.value if result.error_category else ""
        message = _cut(_first_line(result.error_message or ""))
        self.tripped = BreakerTrip(
            self.after, category, cause, message, list(self._streak), in_flight
        )
        return self.tripped

    def matches(self, result: ExecutionResult, row_id: str) -> bool:
        """Whether the breaker has tripped and ``result`` failed with the cause it tripped on."""
        trip = self.tripped
        return trip is not None and self.cause_of(result, row_id) == trip.cause

    @staticmethod
    def cause_of(result: ExecutionResult, row_id: str) -> str | None:
        """:func:`failure_cause` of a result (``None`` for one that did not fail)."""
        if result.status is not RolloutStatus.FAILURE:
            return None
        category = result.error_category.value if result.error_category else None
        return failure_cause(category, result.error_message, (result.rollout_id, row_id))
