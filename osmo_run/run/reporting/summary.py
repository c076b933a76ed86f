"""Statistics over finished rollouts, accumulated one record at a time.

Failures never leave a denominator silently: the summary reports the mean reward over
graded rollouts *and* the mean with every other rollout counted as 0, side by side with
coverage (graded / total), standard errors, 95% intervals and pass@k. The same builder
serves a live run and ``osmo-run report`` reading a run's files.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from osmo_run.run.controls.breaker import BreakerTrip
from osmo_run.run.reporting.quantiles import QuantileSketch
from osmo_run.run.reporting.stats import MeanEstimate, estimate_mean, mean_pass_at_k, pass_at_k_ks
from osmo_run.sdk.model_budget import BudgetSpent
from osmo_run.sdk.types import ExecutionResult, LLMUsage


@dataclass
class UsageSummary:
    """Model usage over the rollouts that called a model: totals, and percentiles of what
    one rollout spent (each a ``(p50, p95, max)``)."""

    rollouts: int
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    model_sec: float
    prompt_per_rollout: tuple[float | None, float | None, float | None]
    completion_per_rollout: tuple[float | None, float | None, float | None]
    total_per_rollout: tuple[float | None, float | None, float | None]

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def completion_tokens_per_sec(self) -> float | None:
        """Completion tokens per second of waiting for the model, summed over rollouts."""
        return self.completion_tokens / self.model_sec if self.model_sec > 0 else None

    def to_dict(self) -> dict[str, Any]:
        def spread(values: tuple[float | None, float | None, float | None]) -> dict[str, Any]:
            return dict(zip(("p50", "p95", "max"), values, strict=True))

        return {
            "rollouts": self.rollouts,
            "model_calls": self.model_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "model_sec": round(self.model_sec, 6),
            "completion_tokens_per_model_sec": self.completion_tokens_per_sec,
            "per_rollout": {
                "prompt_tokens": spread(self.prompt_per_rollout),
                "completion_tokens": spread(self.completion_per_rollout),
                "total_tokens": spread(self.total_per_rollout),
            },
        }


def _spread(values: QuantileSketch) -> tuple[float | None, float | None, float | None]:
    return values.quantile(0.5), values.quantile(0.95), values.max


class UsageTally:
    """Accumulates one kind of model usage (the workflows' or the graders') over rollouts,
    in bounded sketches."""

    def __init__(self) -> None:
        self._prompt_tokens = QuantileSketch()
        self._completion_tokens = QuantileSketch()
        self._total_tokens = QuantileSketch()
        self._model_calls = 0
        self._model_sec = 0.0

    def add(self, usage: LLMUsage | None) -> None:
        """Count one rollout's usage; ``None`` or no call counts nothing."""
        if usage is None or not usage.model_calls:
            return
        self._prompt_tokens.add(usage.prompt_tokens)
        self._completion_tokens.add(usage.completion_tokens)
        self._total_tokens.add(usage.prompt_tokens + usage.completion_tokens)
        self._model_calls += usage.model_calls
        self._model_sec += usage.model_sec

    def summary(self) -> UsageSummary | None:
        """The totals and per-rollout percentiles; ``None`` when no rollout counted any."""
        if not self._prompt_tokens.count:
            return None
        return UsageSummary(
            rollouts=self._prompt_tokens.count,
            model_calls=self._model_calls,
            prompt_tokens=int(self._prompt_tokens.total),
            completion_tokens=int(self._completion_tokens.total),
            model_sec=self._model_sec,
            prompt_per_rollout=_spread(self._prompt_tokens),
            completion_per_rollout=_spread(self._completion_tokens),
            total_per_rollout=_spread(self._total_tokens),
        )


@dataclass
class RunSummary:
    """What the end of a run reports; ``to_dict`` is the saved summary JSON."""

    total: int
    by_status: dict[str, int]
    error_categories: dict[str, int]
    graded: int
    reward_sum: float
    reward_min: float | None
    reward_max: float | None
    duration_p50: float | None
    duration_p95: float | None
    duration_max: float | None
    grader_skipped: dict[str, int] = field(default_factory=dict)
    output: str | None = None
    interrupted: bool = False
    graded_estimate: MeanEstimate | None = None
    all_estimate: MeanEstimate | None = None
    pass_threshold: float = 1.0
    passed: int = 0
    pass_estimate: MeanEstimate | None = None
    """The pass rate with its Wilson interval (clustered by row with several samples)."""
    pass_at_k: dict[int, float | None] = field(default_factory=dict)
    samples_per_row: int = 1
    stopped_early: bool = False
    """Fail-fast or the breaker stopped dispatching."""
    not_run: int = 0
    """Rollouts of the run that fail-fast or the breaker left unstarted; the gates count
    them as failed (``total`` counts only the recorded ones)."""
    breaker: BreakerTrip | None = None
    """Why the breaker stopped the run (``None``: it did not)."""
    usage: UsageSummary | None = None
    """The workflows' model tokens and calls; ``None`` when no rollout reported any."""
    grader_usage: UsageSummary | None = None
    """The graders' (a judge's), apart from the workflows'; ``None`` when none made any."""
    model: dict[str, Any] | None = None
    """The model layer's record: each endpoint's limit (``model_limits``: min, final, 429s)
    and the budget with what was spent (:meth:`osmo_run.sdk.model_layer.ModelLayer.summary`)."""
    budget: BudgetSpent | None = None
    """Why the budget stopped the run (``None``: it did not)."""

    @property
    def mean_reward_graded(self) -> float | None:
        """Mean over rollouts that got a reward."""
        return self.reward_sum / self.graded if self.graded else None

    @property
    def mean_reward_all(self) -> float | None:
        """Mean over every rollout, those without a reward counted as 0."""
        return self.reward_sum / self.total if self.total else None

    @property
    def coverage(self) -> float | None:
        """Share of rollouts that were graded."""
        return self.graded / self.total if self.total else None

    @property
    def pass_rate(self) -> float | None:
        """Share of all rollouts whose reward reached the pass threshold."""
        return self.passed / self.total if self.total else None

    @property
    def failed(self) -> int:
        return self.by_status.get("failure", 0) + self.by_status.get("cancelled", 0)

    def to_dict(self) -> dict[str, Any]:
        graded = self.graded_estimate or estimate_mean(0, 0.0, 0.0)
        everything = self.all_estimate or estimate_mean(0, 0.0, 0.0)
        pass_rate = self.pass_estimate or estimate_mean(0, 0.0, 0.0)
        return {
            "schema_version": 1,
            "total": self.total,
            "by_status": self.by_status,
            "error_categories": self.error_categories,
            "grader_skipped": self.grader_skipped,
            "graded": self.graded,
            "coverage": self.coverage,
            "reward": {
                "mean_graded": self.mean_reward_graded,
                "mean_all": self.mean_reward_all,
                "min": self.reward_min,
                "max": self.reward_max,
                "graded": graded.to_dict(),
                "all": everything.to_dict(),
            },
            "pass": {
                "threshold": self.pass_threshold,
                "passed": self.passed,
                "rate": self.pass_rate,
                "ci95": pass_rate.to_dict()["ci95"],
                "ci_method": pass_rate.method,
                "pass_at_k": {str(k): v for k, v in self.pass_at_k.items()},
            },
            "samples_per_row": self.samples_per_row,
            "duration_sec": {
                "p50": self.duration_p50,
                "p95": self.duration_p95,
                "max": self.duration_max,
            },
            "output": self.output,
            "interrupted": self.interrupted,
            "stopped_early": self.stopped_early,
            "not_run": self.not_run,
            "breaker": None if self.breaker is None else self.breaker.to_dict(),
            "usage": None if self.usage is None else self.usage.to_dict(),
            "grader_usage": None if self.grader_usage is None else self.grader_usage.to_dict(),
            "model_limits": (self.model or {}).get("model_limits", []),
            "budget": {
                **(self.model or {}).get("budget", {}),
                "stopped": None if self.budget is None else self.budget.to_dict(),
            }
            if self.model and "budget" in self.model
            else None,
        }


_ROLLOUTS, _PASSED, _GRADED, _REWARD_SUM = range(4)
"""The fields of a row's entry in ``SummaryBuilder._per_row``."""


class SummaryBuilder:
    """Accumulates finished rollouts. Memory does not grow with the run's length but for four
    numbers per row when ``samples_per_row > 1`` (rollouts, passes, graded and reward sum:
    pass@k and the standard errors clustered by row): durations and token counts go to
    bounded :class:`~osmo_run.run.reporting.quantiles.QuantileSketch` es."""

    def __init__(self, pass_threshold: float = 1.0, samples_per_row: int = 1) -> None:
        self.pass_threshold = pass_threshold
        self.samples_per_row = samples_per_row
        self._status: Counter[str] = Counter()
        self._categories: Counter[str] = Counter()
        self._skipped: Counter[str] = Counter()
        self._durations = QuantileSketch()
        self._graded = 0
        self._reward_sum = 0.0
        self._reward_sq = 0.0
        self._reward_min: float | None = None
        self._reward_max: float | None = None
        self._passed = 0
        self._binary = True
        """Every reward so far is 0 or 1 (the mean is a proportion: Wilson intervals)."""
        self._per_row: dict[int, list[float]] = {}
        """Per row (samples_per_row > 1): [rollouts, passed, graded, reward sum]."""
        self._usage = UsageTally()
        self._grader_usage = UsageTally()

    @property
    def finished(self) -> int:
        return self._durations.count

    @property
    def failed(self) -> int:
        return self._status["failure"] + self._status["cancelled"]

    def add_values(
        self,
        status: str,
        category: str | None,
        reward: float | None,
        skipped: str | None,
        seconds: float,
        row_index: int = 0,
        usage: LLMUsage | None = None,
        grader_usage: LLMUsage | None = None,
    ) -> None:
        """Count one rollout. A reward counts only on a successful rollout."""
        self._usage.add(usage)
        self._grader_usage.add(grader_usage)
        self._status[status] += 1
        if category is not None:
            self._categories[category] += 1
        if skipped is not None:
            self._skipped[skipped] += 1
        self._durations.add(seconds)
        passed = False
        if reward is not None and status == "success":
            self._graded += 1
            self._reward_sum += reward
            self._reward_sq += reward * reward
            self._binary = self._binary and reward in (0.0, 1.0)
            if self._reward_min is None or reward < self._reward_min:
                self._reward_min = reward
            if self._reward_max is None or reward > self._reward_max:
                self._reward_max = reward
            passed = reward >= self.pass_threshold
            self._passed += passed
        if self.samples_per_row > 1:
            counts = self._per_row.setdefault(row_index, [0, 0, 0, 0.0])
            counts[_ROLLOUTS] += 1
            counts[_PASSED] += passed
            if reward is not None and status == "success":
                counts[_GRADED] += 1
                counts[_REWARD_SUM] += reward

    def add_result(
        self, result: ExecutionResult, row_index: int, grader_skipped: str | None
    ) -> None:
        """Count one rollout the run has just recorded, from ``result`` itself and the
        facts of its record the result does not hold: its ``row_index`` and its
        ``grader_skipped`` as written (secrets masked). Counts exactly what
        :meth:`add_record` counts of the line written for it: seconds rounded as the
        record rounds them, so a run's summary and ``report``'s agree."""
        sample = result.sample
        category = result.error_category
        self.add_values(
            result.status.value,
            None if category is None else category.value,
            None if sample is None else sample.reward,
            grader_skipped,
            round(result.timings.total_sec, 6),
            row_index,
            _as_recorded(result.usage),
            _as_recorded(result.grader_usage),
        )

    def add_record(self, record: dict[str, Any]) -> None:
        """Count one output-file record (see :mod:`osmo_run.run.writing.records`)."""
        self.add_values(
            str(record.get("status")),
            record.get("error_category"),
            record.get("reward"),
            record.get("grader_skipped"),
            float((record.get("timings") or {}).get("total_sec") or 0.0),
            int(record.get("row_index") or 0),
            LLMUsage.from_dict(record.get("usage")),
            LLMUsage.from_dict(record.get("grader_usage")),
        )

    def _clusters(self, count_at: int, sum_at: int) -> list[tuple[float, float]] | None:
        """``(count, sum)`` per row for a standard error clustered by row, from the
        per-row fields at ``count_at`` and ``sum_at``; ``None`` with one sample per row."""
        if self.samples_per_row == 1:
            return None
        return [(row[count_at], row[sum_at]) for row in self._per_row.values() if row[count_at]]

    def _reward_estimate(self, graded_only: bool) -> MeanEstimate:
        """The mean reward over graded rollouts, or over all with the others as 0; its
        interval is clipped to the values observed (0 included when some are ungraded)."""
        n = self._graded if graded_only else self.finished
        if not self._graded:  # nothing graded: 0 by construction, nothing to estimate
            return MeanEstimate(n, 0.0 if n else None, None, None, None)
        low, high = self._reward_min, self._reward_max
        if not graded_only and n > self._graded:
            low, high = min(low or 0.0, 0.0), max(high or 0.0, 0.0)
        return estimate_mean(
            n,
            self._reward_sum,
            self._reward_sq,
            low=low,
            high=high,
            binary=self._binary,
            clusters=self._clusters(_GRADED if graded_only else _ROLLOUTS, _REWARD_SUM),
        )

    def _pass_estimate(self, total: int) -> MeanEstimate:
        if not self._graded:  # no reward could reach the threshold: no rate to estimate
            return MeanEstimate(total, 0.0 if total else None, None, None, None)
        clusters = self._clusters(_ROLLOUTS, _PASSED)
        return estimate_mean(total, self._passed, self._passed, binary=True, clusters=clusters)

    def build(
        self,
        output: str | None = None,
        interrupted: bool = False,
        stopped_early: bool = False,
        breaker: BreakerTrip | None = None,
        not_run: int = 0,
    ) -> RunSummary:
        """The summary of every rollout counted, with what the run adds: where its results
        are (``output``), whether Ctrl-C (``interrupted``), fail-fast or the breaker
        (``stopped_early``; ``breaker`` says why it tripped) ended it, and how many of its
        rollouts it left unstarted (``not_run``). Built once, complete: nothing patches a
        summary afterwards."""
        durations = self._durations
        total = durations.count
        if self.samples_per_row > 1:
            rows = [(int(n), int(c)) for n, c, _, _ in self._per_row.values()]
            pass_k = {k: mean_pass_at_k(rows, k) for k in pass_at_k_ks(self.samples_per_row)}
        else:
            pass_k = {1: self._passed / total if total else None}
        return RunSummary(
            total=total,
            by_status=dict(self._status.most_common()),
            error_categories=dict(self._categories.most_common()),
            graded=self._graded,
            reward_sum=self._reward_sum,
            reward_min=self._reward_min,
            reward_max=self._reward_max,
            duration_p50=durations.quantile(0.5),
            duration_p95=durations.quantile(0.95),
            duration_max=durations.max,
            grader_skipped=dict(self._skipped.most_common()),
            output=output,
            interrupted=interrupted,
            graded_estimate=self._reward_estimate(graded_only=True),
            all_estimate=self._reward_estimate(graded_only=False),
            pass_threshold=self.pass_threshold,
            passed=self._passed,
            pass_estimate=self._pass_estimate(total),
            pass_at_k=pass_k,
            samples_per_row=self.samples_per_row,
            usage=self._usage.summary(),
            grader_usage=self._grader_usage.summary(),
            stopped_early=stopped_early,
            not_run=not_run,
            breaker=breaker,
        )


def with_not_run(summary: RunSummary, not_run: int) -> RunSummary:
    """``summary`` of a run that left ``not_run`` of its rollouts unstarted (fail-fast, the
    breaker, ``--retry-errors`` alone): a new summary, its breaker's ``not_started`` said
    too; ``summary`` itself is left as it was built."""
    trip = summary.breaker
    if trip is not None:
        trip = dataclasses.replace(trip, not_started=not_run)
    return dataclasses.replace(summary, not_run=not_run, breaker=trip)


def _as_recorded(usage: LLMUsage | None) -> LLMUsage | None:
    """``usage`` as its record reads back (:meth:`LLMUsage.to_dict` rounds ``model_sec``)."""
    if usage is None:
        return None
    model_sec = round(usage.model_sec, 6)
    if model_sec == usage.model_sec:
        return usage
    recorded = usage.copy()  # once per row that called a model: no dataclasses.replace
    recorded.model_sec = model_sec
    return recorded
