"""Quality gates and error budgets: whether a finished run passes, as a pure function.

With no gate given, any failed rollout fails the run. With gates given, only the gates
decide: ``--fail-under`` (mean reward, failures counted as 0), ``--min-pass-rate``,
``--max-errors`` and ``--max-error-rate`` (either overall or for one category).

Rollouts a stopped run never started (fail-fast, ``--smoke``) count as failed rollouts in
every gate: reward 0, not passed, an error in the overall budgets, and in the denominator
of every rate. A run cannot pass a gate on the rows it happened to run before it stopped.
A run of no rollouts at all (an empty shard) passes every gate: there is nothing to judge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from osmo_run.errors import InputError
from osmo_run.run.reporting.summary import RunSummary
from osmo_run.sdk.types import ErrorCategory


@dataclass(frozen=True)
class ErrorBudget:
    """At most ``limit`` failed rollouts (a count, or a fraction of all when ``rate``),
    counting only ``category`` when given."""

    limit: float
    rate: bool
    category: str | None = None

    def describe(self) -> str:
        flag = "--max-error-rate" if self.rate else "--max-errors"
        scope = f" ({self.category})" if self.category else ""
        return f"{flag}{scope}"


@dataclass(frozen=True)
class Gates:
    """The thresholds a run must meet; all ``None``/empty means "no failed rollout"."""

    fail_under: float | None = None
    min_pass_rate: float | None = None
    budgets: tuple[ErrorBudget, ...] = field(default_factory=tuple)

    @property
    def given(self) -> bool:
        return self.fail_under is not None or self.min_pass_rate is not None or bool(self.budgets)


@dataclass(frozen=True)
class GateFailure:
    """One gate that did not hold. ``kind`` is ``rollouts`` (no gate given and a rollout
    failed), ``quality`` (a score or pass-rate gate) or ``budget`` (an error budget)."""

    gate: str
    measured: float
    threshold: float
    kind: str

    def line(self) -> str:
        """One line a person reads in a CI log."""
        relation = "below the minimum" if self.kind == "quality" else "above the maximum"
        measured, threshold = _distinct(self.measured, self.threshold)
        return f"gate failed: {self.gate} measured {measured}, {relation} {threshold}"


def _distinct(measured: float, threshold: float) -> tuple[str, str]:
    """Both numbers to 4 significant digits, or to more where 4 would show them equal."""
    for digits in (4, 6, 8, 10, 12, 17):
        shown = f"{measured:.{digits}g}", f"{threshold:.{digits}g}"
        if shown[0] != shown[1]:
            break
    return shown


_TOLERANCE = 1e-9
"""Relative slack in comparisons: a mean summed in binary floating point (0.7 + 0.1 is
0.7999999999999999) still meets a threshold it equals in decimal."""


def _below(measured: float, minimum: float) -> bool:
    return measured < minimum and not math.isclose(measured, minimum, rel_tol=_TOLERANCE)


def check_threshold(
    flag: str, value: float | None, expected: str, bounds: tuple[float, float] | None = None
) -> None:
    """Raise :class:`InputError` unless ``value`` is ``None`` or a finite number within
    ``bounds``: NaN compares false with everything, so a NaN gate could never fail."""
    if value is None:
        return
    if not math.isfinite(value) or (bounds is not None and not bounds[0] <= value <= bounds[1]):
        raise InputError(f"{flag}: {value:g} must be {expected}")


def parse_budget(value: str, rate: bool) -> ErrorBudget:
    """``"5"`` or ``"timeout=5"`` (``"0.1"``/``"timeout=0.1"`` for a rate).

    Raises :class:`InputError` naming the flag and what is wrong.
    """
    flag = "--max-error-rate" if rate else "--max-errors"
    category, sep, number = value.rpartition("=")
    if sep and category not in {c.value for c in ErrorCategory}:
        known = ", ".join(sorted(c.value for c in ErrorCategory))
        raise InputError(f"{flag}: {category!r} is not an error category ({known})")
    try:
        limit = float(number)
    except ValueError:
        raise InputError(f"{flag}: {number!r} is not a number (e.g. {flag} 5)") from None
    if (
        not math.isfinite(limit)
        or limit < 0
        or (rate and limit > 1)
        or (not rate and limit != int(limit))
    ):
        expected = "a fraction from 0 to 1" if rate else "a whole number of rollouts"
        raise InputError(f"{flag}: {value!r} must be {expected}")
    return ErrorBudget(limit=limit, rate=rate, category=category or None)


def evaluate(summary: RunSummary, gates: Gates) -> list[GateFailure]:
    """Every gate that ``summary`` fails (empty when the run passes).

    Without gates, each failed rollout fails the run (reported as one ``rollouts`` entry).
    ``summary.not_run`` rollouts count as failed ones (see the module docstring).
    """
    failures: list[GateFailure] = []
    not_run = summary.not_run
    errors = summary.failed + not_run
    if not gates.given:
        if errors:
            failures.append(GateFailure("failed rollouts", errors, 0, "rollouts"))
        return failures
    total = summary.total + not_run
    if not total:  # an empty shard: nothing ran and nothing was skipped, nothing to judge
        return failures
    for budget in gates.budgets:
        count = summary.error_categories.get(budget.category, 0) if budget.category else errors
        measured = count / total if budget.rate and total else float(count)
        if budget.rate and not total:
            measured = 0.0
        if _below(budget.limit, measured):
            failures.append(GateFailure(budget.describe(), measured, budget.limit, "budget"))
    if gates.fail_under is not None:
        mean = summary.reward_sum / total if total else 0.0
        if _below(mean, gates.fail_under):
            gate = "--fail-under (mean reward, failures as 0)"
            failures.append(GateFailure(gate, mean, gates.fail_under, "quality"))
    if gates.min_pass_rate is not None:
        rate = summary.passed / total if total else 0.0
        if _below(rate, gates.min_pass_rate):
            failures.append(GateFailure("--min-pass-rate", rate, gates.min_pass_rate, "quality"))
    return failures
