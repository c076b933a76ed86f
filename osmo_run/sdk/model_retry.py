"""Per-call retries of model calls: 429, 5xx and refused connections, where they happen.

A model call that answers HTTP 429 (rate limited), 408 or a 5xx, or whose connection is
refused or dropped, is tried again after an exponential backoff with jitter, or after the
endpoint's ``Retry-After``, until it succeeds, its tries run out, or the next wait would
pass the rollout's deadline. Each call that needed a retry is counted once in the
rollout's ``usage.retried_calls``, so a rate-limited run shows in its rows. A call that
keeps failing raises as it did on its first try (``RateLimitError`` → ``rate_limit``,
otherwise ``model_api_error``), and the run-level ``retries:`` policy may then run the
whole rollout again. Used by :func:`osmo_run.sdk.llm.chat_completion` and by the
agent-framework integrations' transport. Stdlib only.
"""

from __future__ import annotations

import email.utils
import math
import random
import re
import time
from dataclasses import dataclass
from typing import Protocol

from osmo_run.sdk.context import _current

RETRYABLE_STATUSES = frozenset({408, 429})
"""Retried besides every 5xx: request timeout and rate limited."""


def is_retryable_status(status: int) -> bool:
    """Whether an answer with HTTP ``status`` is worth the same call again."""
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


@dataclass(frozen=True)
class CallRetryPolicy:
    """How one model call is retried: at most ``max_tries`` tries (the first included);
    waits of ``initial_backoff_sec * multiplier^(n-1)``, at most ``max_backoff_sec``, each
    scaled by a random factor in ``[1 - jitter, 1 + jitter]``. A ``Retry-After`` up to
    ``max_backoff_sec`` is waited instead (plus up to ``jitter / 2`` of itself, so many rows
    told the same second do not come back at once); a longer one ends the call's tries."""

    max_tries: int = 8
    initial_backoff_sec: float = 0.5
    multiplier: float = 2.0
    max_backoff_sec: float = 30.0
    jitter: float = 0.5

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """The wait before retry number ``retry`` (1 for the first), jitter included."""
        base = min(self.initial_backoff_sec * self.multiplier ** (retry - 1), self.max_backoff_sec)
        draw = (rng or random).uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return max(base * draw, 0.0)


DEFAULT_POLICY = CallRetryPolicy()


class _Headers(Protocol):
    def get(self, name: str, /) -> str | None: ...


def retry_after_sec(headers: _Headers | None, now: float | None = None) -> float | None:
    """Seconds the answer's headers ask to wait: ``retry-after-ms`` (OpenAI's), else
    ``Retry-After`` (seconds, or an HTTP date); ``None`` when absent or unreadable.
    ``headers`` is any case-insensitive mapping (aiohttp's, httpx's, urllib's)."""
    if headers is None:
        return None
    seconds: float | None = None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        seconds = _number(milliseconds)
        seconds = None if seconds is None else seconds / 1000.0
    value = headers.get("retry-after")
    if seconds is None and value:
        seconds = _number(value)
        if seconds is None:
            try:
                when = email.utils.parsedate_to_datetime(value.strip())
                seconds = when.timestamp() - (time.time() if now is None else now)
            except (TypeError, ValueError, IndexError):
                return None
    if seconds is None or not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


class CallRetries:
    """The retry state of one model call: ask :meth:`next_wait` after each failed try.

    ``deadline`` is a ``time.monotonic()`` instant (default: the running rollout's
    deadline, if any) that no retry may pass: a wait and a try as long as the last one must
    end before it. Create it as the first try starts.
    """

    def __init__(
        self, policy: CallRetryPolicy = DEFAULT_POLICY, deadline: float | None = None
    ) -> None:
        self.policy = policy
        rollout = _current.get()
        if deadline is None and rollout is not None:
            deadline = rollout.deadline
        self.deadline = deadline
        self.tries = 1
        self.gave_up_because = ""
        self._try_started = time.monotonic()

    def next_wait(self, retry_after: float | None = None) -> float | None:
        """How long to wait before the next try, or ``None`` to give up (then
        :attr:`gave_up_because` says why). Counts the call in the rollout's
        ``usage.retried_calls`` the first time it says to retry."""
        policy = self.policy
        if self.tries == 1:  # retried, or given up on at once: it needed a retry either way
            rollout = _current.get()
            if rollout is not None:
                rollout.record_retried_call()
        asked = "" if retry_after is None else f"{RETRY_AFTER_NOTE} {retry_after:g}s"
        if self.tries >= policy.max_tries:
            self.gave_up_because = _joined(asked, f"gave up after {self.tries} tries")
            return None
        if retry_after is not None:
            if retry_after > policy.max_backoff_sec:
                self.gave_up_because = (
                    f"{asked} is longer than the {policy.max_backoff_sec:g}s a call waits; "
                    f"gave up after {self.tries} tries"
                )
                return None
            wait = retry_after * random.uniform(1.0, 1.0 + policy.jitter / 2)
        else:
            wait = policy.backoff(self.tries)
        now = time.monotonic()
        last_try = now - self._try_started  # the next one is likely as long
        if self.deadline is not None and now + wait + last_try >= self.deadline:
            self.gave_up_because = _joined(
                asked,
                f"the next try would pass the rollout's deadline; gave up after {self.tries} tries",
            )
            return None
        self._try_started = now + wait
        self.tries += 1
        return wait


RETRY_AFTER_NOTE = "Retry-After"
"""How a give-up note names the wait the endpoint asked for: ``(Retry-After 120s ...)``."""

_ASKED = re.compile(
    r"answered HTTP \d{3} \(" + RETRY_AFTER_NOTE + r" (\d+(?:\.\d+)?(?:e[+-]?\d+)?)s\b"
)
"""The note right after the status, before the endpoint's own text (which could say
anything)."""


def _joined(asked: str, reason: str) -> str:
    return f"{asked}: {reason}" if asked else reason


def asked_wait_sec(message: str) -> float | None:
    """The seconds a call's give-up note in ``message`` says the endpoint asked to wait
    (``Retry-After``); ``None`` when the message has no such note. What the run-level
    ``retries:`` policy reads, so that the rollout's next attempt does not call before."""
    found = _ASKED.search(message)
    return None if found is None else float(found.group(1))
