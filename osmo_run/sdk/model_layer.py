"""The run's model layer: per-endpoint limits and the budget every model call goes through.

A run (``osmo-run local``) makes one :class:`ModelLayer` current around its rows
(:func:`use_model_layer`); each try of a model call, from ``chat_completion``, the
agent-framework integrations' transport or the judge, runs inside :func:`model_call`: it
waits for a slot under its endpoint's limit (:mod:`osmo_run.sdk.model_limits`), is admitted
by the budget (:mod:`osmo_run.sdk.model_budget`; refused calls raise
:class:`~osmo_run.errors.BudgetExceededError` and are never sent), and tells the limit how it
ended. :func:`record_spent` counts an answered call's tokens against the budget. Where no
layer is current (a sandbox, no run) calls go as they did. Stdlib only.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any, Protocol

from osmo_run.errors import BudgetExceededError
from osmo_run.sdk.context import _current
from osmo_run.sdk.model_budget import RunBudget
from osmo_run.sdk.model_limits import ModelLimits, Outcome, Slot, outcome_of
from osmo_run.sdk.turns import note_missing_ids


class LayerDisplay(Protocol):
    """What :meth:`ModelLayer.show_on` needs of a run's display."""

    model_status: Callable[[], str | None] | None

    def row_waiting_for_model(self, row_id: str, waiting: bool) -> None: ...

    def message(self, text: str) -> None: ...


class ModelLayer:
    """The limits and budget of one run's model calls (see the module docstring)."""

    def __init__(self, limits: ModelLimits, budget: RunBudget | None = None) -> None:
        self.limits = limits
        self.budget = budget if budget is not None and budget.limited else None
        self.on_wait: Callable[[str, bool], None] | None = None
        """Told ``(rollout_id, True)`` when a rollout's call starts waiting for a slot and
        ``(rollout_id, False)`` when it stops (the live table shows it)."""
        self.on_notice: Callable[[str], None] | None = None
        """Told a line the run's user should read once (the live display shows it;
        without it the line goes to stderr)."""
        self.noted_endpoints: set[str] = set()
        """The endpoints said to answer without token ids (:func:`note_no_token_ids`)."""

    @property
    def budget_spent(self) -> bool:
        """Whether the run's budget is spent (``False`` where the run sets none)."""
        return self.budget is not None and self.budget.spent

    def show_on(self, display: LayerDisplay, mask: Callable[[str], str]) -> None:
        """Show this layer's state on ``display``: its status line, the rollouts waiting
        for a slot, and its notices once each, masked by ``mask`` (the run's secrets)."""
        display.model_status = self.status
        self.on_wait = display.row_waiting_for_model
        self.on_notice = lambda line: display.message(mask(line))

    def status(self) -> str | None:
        """The live display's words for the model layer (``None`` before any call)."""
        return self.limits.status()

    def summary(self) -> dict[str, Any]:
        """What the run's summary records: each endpoint's limit and the budget."""
        limits = [limit.stats().to_dict() for limit in self.limits.all()]
        out: dict[str, Any] = {"model_limits": limits}
        if self.budget is not None:
            out["budget"] = self.budget.to_dict()
        return out


_current_layer: contextvars.ContextVar[ModelLayer | None] = contextvars.ContextVar(
    "osmo_run_model_layer", default=None
)


def current_model_layer() -> ModelLayer | None:
    """The model layer of the run this code runs in, or ``None``."""
    return _current_layer.get()


def use_model_layer(layer: ModelLayer | None) -> contextvars.Token[ModelLayer | None]:
    """Make ``layer`` current in this context (tasks created from it inherit it); undo
    with :func:`reset_model_layer`."""
    return _current_layer.set(layer)


def reset_model_layer(token: contextvars.Token[ModelLayer | None]) -> None:
    _current_layer.reset(token)


class _NoSlot:
    """What :func:`model_call` yields where no layer is current: outcomes go nowhere."""

    def done(self, outcome: Outcome) -> None:
        pass


class model_call:  # lower case: called as the function it was, `async with model_call(url)`
    """One try of a model call to ``url``: wait for a slot under the endpoint's limit, then
    be admitted by the budget (``BudgetExceededError`` when spent: nothing is sent). Tell
    the yielded slot how the try ended: ``slot.done(answered(status, headers))``.
    ``first_try`` is false for a retry (it does not count as another call in
    ``model_calls``).

    A class with ``__aenter__``/``__aexit__`` rather than an ``asynccontextmanager``
    generator: every model call passes here, and the generator's machinery cost about as
    much as the limit and the budget themselves. The slot is left however the try ends."""

    __slots__ = ("_first_try", "_slot", "_url")

    def __init__(self, url: str, first_try: bool = True) -> None:
        self._url = url
        self._first_try = first_try
        self._slot: Slot | None = None

    async def __aenter__(self) -> Slot | _NoSlot:
        layer = current_model_layer()
        if layer is None:
            return _NO_SLOT
        limit = layer.limits.for_url(self._url)
        rollout = _current.get()
        shown = None if layer.on_wait is None or rollout is None or not limit.full else rollout
        if shown is not None and layer.on_wait is not None:
            layer.on_wait(shown.rollout_id, True)
        slot = limit.slot()
        try:
            await slot.__aenter__()
        finally:
            if shown is not None and layer.on_wait is not None:
                layer.on_wait(shown.rollout_id, False)
        if layer.budget is not None:
            try:
                layer.budget.admit(self._first_try)
            except BaseException as exc:
                if isinstance(exc, BudgetExceededError):
                    slot.done(Outcome.NOT_SENT)
                await slot.__aexit__(None, None, None)
                raise
        self._slot = slot
        return slot

    async def __aexit__(self, *exc: object) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            await slot.__aexit__(None, None, None)


_NO_SLOT = _NoSlot()


def answered(status: int | None, headers: Any = None) -> Outcome:
    """The limit's outcome of an answer with HTTP ``status`` and ``headers`` (any
    case-insensitive mapping; ``None``: no answer came)."""
    has_retry_after = headers is not None and bool(
        headers.get("retry-after") or headers.get("retry-after-ms")
    )
    return outcome_of(status, has_retry_after)


def record_spent(
    prompt_tokens: int, completion_tokens: int, model: str | None, uncounted: str | None = None
) -> None:
    """Count an answered call's tokens against the current run's budget (if any).
    ``uncounted`` names a usage field the answer lacked or held unreadable: a tokens or usd
    budget then stops the run (it cannot be kept)."""
    layer = current_model_layer()
    if layer is not None and layer.budget is not None:
        layer.budget.record(prompt_tokens, completion_tokens, model)
        if uncounted is not None:
            layer.budget.uncounted(uncounted, model)


def note_no_token_ids(url: str, missing: str = "token ids") -> None:
    """Say once per run (once per process outside one) that ``url`` answers without
    ``missing`` (``"token ids"``, ``"prompt token ids"``...), on the run's display or
    stderr: never once per call."""
    layer = current_model_layer()
    if layer is None:
        note_missing_ids(url, missing)
    else:
        note_missing_ids(url, missing, layer.noted_endpoints, layer.on_notice)
