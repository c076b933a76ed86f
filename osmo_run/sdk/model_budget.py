"""A run's budget: tokens, dollars and model calls, counted on every model call, failing closed.

``budget: {tokens: N, usd: X, model_calls: N}`` in the spec (``--budget-tokens``,
``--budget-usd``) becomes one :class:`RunBudget` per run. Every model call of the run asks it
before each try (:meth:`RunBudget.admit`) and reports what its answer used
(:meth:`RunBudget.record`): ``chat_completion``, both agent-framework integrations and the
judge. Once a limit is reached no new call leaves: :meth:`admit` raises
:class:`~osmo_run.errors.BudgetExceededError` (the rollout's ``budget_exceeded``). Calls
already in flight finish and are counted, so a ``tokens`` or ``usd`` budget can be passed by
what those calls use: at most the calls in flight when it was reached (the run's concurrency
at most) times the tokens of one call. ``model_calls`` is never passed: a call takes its
place when it is admitted.

Cost comes from the prices the spec gives per model (``prices: {MODEL: {input_per_mtok,
output_per_mtok}}``, dollars per million tokens); nothing is fetched. Stdlib only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from osmo_run.errors import BudgetExceededError

REFUSED_STATUS = 402
"""The HTTP status the model gateway of Harbor trials answers a call the run's budget
refused with (with :data:`REFUSED_HEADER`): not one any client retries."""

REFUSED_HEADER = "X-Osmo-Run-Budget"
"""The header (value ``spent``) that tells a budget refusal from a provider's own 402
(some answer 402 for an account out of credit)."""


class _Headers(Protocol):
    def get(self, name: str, /) -> str | None: ...


def refusal_answer(message: str) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and JSON body of the gateway's answer to a call the budget refused
    (``message`` says why): an OpenAI-style error whose ``type`` and ``code`` are
    ``budget_exceeded``."""
    error = {"message": message, "type": "budget_exceeded", "code": "budget_exceeded"}
    headers = {REFUSED_HEADER: "spent", "Content-Type": "application/json"}
    return REFUSED_STATUS, headers, json.dumps({"error": error}).encode()


def refused_by_budget(status: int, headers: _Headers | None, body: bytes = b"") -> str | None:
    """The message of a budget refusal (:func:`refusal_answer`) when this answer is one, else
    ``None``: inside a trial, the call raises :class:`BudgetExceededError` with it."""
    if status != REFUSED_STATUS or headers is None or headers.get(REFUSED_HEADER) != "spent":
        return None
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError, RecursionError):
        message = None
    return message if isinstance(message, str) else "the run's budget is spent"


@dataclass(frozen=True)
class Price:
    """Dollars per million input (prompt) and output (completion) tokens of one model."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok
        ) / 1e6


@dataclass
class BudgetSpent:
    """What the run had spent when its budget stopped it (the summary's ``budget``)."""

    reached: str
    """Which limit, and how far: ``tokens 1,012 of 1,000 reached``."""
    tokens: int
    usd: float
    model_calls: int
    refused_calls: int
    """Calls that were not sent because the budget was spent."""

    def line(self) -> str:
        return (
            f"budget: {self.reached}; {self.refused_calls:,} model calls were not sent "
            "and no further rows were started (--resume with a larger budget continues)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "reached": self.reached,
            "tokens": self.tokens,
            "usd": round(self.usd, 6),
            "model_calls": self.model_calls,
            "refused_calls": self.refused_calls,
        }


class RunBudget:
    """The budget of one run (see the module docstring). ``None`` for a limit means none;
    ``prices`` maps model names to :class:`Price`; a call of a model without a price costs
    nothing (the spec refuses a ``usd`` budget without prices for its models).
    ``default_model`` prices calls whose model is not known. Use from one event loop.
    """

    def __init__(
        self,
        tokens: int | None = None,
        usd: float | None = None,
        model_calls: int | None = None,
        prices: dict[str, Price] | None = None,
        default_model: str | None = None,
    ) -> None:
        self.tokens = tokens
        self.usd = usd
        self.model_calls = model_calls
        self.prices = dict(prices or {})
        self.default_model = default_model
        self.spent_tokens = 0
        self.spent_usd = 0.0
        self.admitted_calls = 0
        """Calls admitted (their first tries), earlier invocations' included."""
        self.refused_calls = 0
        self._stopped_on: str | None = None
        self._uncounted: str | None = None
        """Why a ``tokens`` or ``usd`` limit can no longer be kept (an answer without usage)."""

    @property
    def limited(self) -> bool:
        """Whether any limit is set."""
        return any(v is not None for v in (self.tokens, self.usd, self.model_calls))

    def seed(self, tokens: int, usd: float, model_calls: int) -> None:
        """Count what earlier invocations of the run spent (``--resume``)."""
        self.spent_tokens += tokens
        self.spent_usd += usd
        self.admitted_calls += model_calls

    def reached(self) -> str | None:
        """Which limit is reached, with how far (``tokens 1,012 of 1,000 reached``), or
        ``None``."""
        if self._uncounted is not None:
            return self._uncounted
        if self.tokens is not None and self.spent_tokens >= self.tokens:
            return f"tokens {self.spent_tokens:,} of {self.tokens:,} reached"
        if self.usd is not None and self.spent_usd >= self.usd:
            return f"usd {self.spent_usd:,.4f} of {self.usd:,.4f} reached"
        if self.model_calls is not None and self.admitted_calls >= self.model_calls:
            return f"model_calls {self.admitted_calls:,} of {self.model_calls:,} reached"
        return None

    @property
    def spent(self) -> bool:
        """Whether no further model call may leave."""
        return self.reached() is not None

    def admit(self, first_try: bool = True) -> None:
        """Let one try of a call leave, or raise :class:`BudgetExceededError` (nothing sent).
        A call's first try takes its place among the ``model_calls``; its retries do not."""
        reached = self.reached()
        if reached is not None:
            self.refused_calls += 1
            if self._stopped_on is None:
                self._stopped_on = reached
            raise BudgetExceededError(
                f"the run's budget is spent ({reached}): this model call was not sent"
            )
        if first_try:
            self.admitted_calls += 1

    def record(self, prompt_tokens: int, completion_tokens: int, model: str | None = None) -> None:
        """Count what one answered call used."""
        self.spent_tokens += prompt_tokens + completion_tokens
        price = self.prices.get(model or self.default_model or "")
        if price is None and model is not None and self.default_model is not None:
            price = self.prices.get(self.default_model)
        if price is not None:
            self.spent_usd += price.cost(prompt_tokens, completion_tokens)

    def uncounted(self, field: str, model: str | None) -> None:
        """An answered call's ``usage.<field>`` was missing or unreadable: a ``tokens`` or
        ``usd`` limit can no longer be kept, so the budget counts as spent (it fails closed:
        the run stops sending calls rather than spend without counting)."""
        if self._uncounted is not None or (self.tokens is None and self.usd is None):
            return
        limit = "budget.tokens" if self.tokens is not None else "budget.usd"
        # a trial names the model it asks for: a name of megabytes stays out of the summary
        named = f" of model {model[:80]!r}{'...' if len(model) > 80 else ''}" if model else ""
        self._uncounted = (
            f"{limit} cannot be kept: an answer{named} came without a usable "
            f"usage.{field}, so its tokens could not be counted (fix the endpoint's usage, "
            "or use budget.model_calls)"
        )

    def stopped(self) -> BudgetSpent | None:
        """What stopped the run, once a call was refused or a limit reached (else ``None``)."""
        reached = self.reached()
        if reached is None and self._stopped_on is None:
            return None
        return BudgetSpent(
            reached=reached or self._stopped_on or "",
            tokens=self.spent_tokens,
            usd=self.spent_usd,
            model_calls=self.admitted_calls,
            refused_calls=self.refused_calls,
        )

    def to_dict(self) -> dict[str, Any]:
        """The budget and what was spent, for the summary."""
        return {
            "limits": {"tokens": self.tokens, "usd": self.usd, "model_calls": self.model_calls},
            "spent": {
                "tokens": self.spent_tokens,
                "usd": round(self.spent_usd, 6),
                "model_calls": self.admitted_calls,
            },
            "refused_calls": self.refused_calls,
        }
