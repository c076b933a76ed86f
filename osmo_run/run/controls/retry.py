"""Which failed rollouts are tried again, and after how long."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from osmo_run.sdk.types import ErrorCategory

DEFAULT_RETRY_CATEGORIES = frozenset(
    {ErrorCategory.INFRA_ERROR, ErrorCategory.RATE_LIMIT, ErrorCategory.MODEL_API_ERROR}
)
NEVER_RETRIED = frozenset(
    {
        ErrorCategory.VALIDATION_ERROR,
        ErrorCategory.CANCELLED,
        ErrorCategory.INTERNAL_ERROR,
        ErrorCategory.BUDGET_EXCEEDED,
    }
)
"""A validation error repeats on every attempt; cancellation and bugs are not transient; a
spent budget stays spent for the rest of the invocation."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, per error category, capped in attempts and time.

    ``max_attempts`` counts the first try (1 = no retries). The delay before retry ``n``
    (n = 1 for the first retry) is ``min(initial * multiplier**(n-1), max)`` scaled by a
    random factor in ``[1 - jitter, 1 + jitter]``. No retry starts once
    ``max_total_retry_sec`` of backoff has been spent on the row.
    """

    max_attempts: int = 3
    categories: frozenset[ErrorCategory] = field(default=DEFAULT_RETRY_CATEGORIES)
    initial_backoff_sec: float = 1.0
    max_backoff_sec: float = 60.0
    multiplier: float = 2.0
    jitter: float = 0.5
    max_total_retry_sec: float = 600.0

    def retries(self, category: ErrorCategory | None, attempt: int, waited_sec: float) -> bool:
        """Whether a rollout that failed with ``category`` on try ``attempt`` goes again."""
        return (
            category is not None
            and category in self.categories
            and category not in NEVER_RETRIED
            and attempt < self.max_attempts
            and waited_sec < self.max_total_retry_sec
        )

    def delay_sec(self, retry_number: int, rng: random.Random | None = None) -> float:
        """Backoff before retry ``retry_number`` (1-based), jittered."""
        base = min(
            self.initial_backoff_sec * self.multiplier ** (retry_number - 1),
            self.max_backoff_sec,
        )
        spread = (rng or random).uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return max(base * spread, 0.0)


NO_RETRIES = RetryPolicy(max_attempts=1)
