"""The summary printed when a run ends, and by ``osmo-run report``: statuses, rewards with
their uncertainty, coverage, pass rate and pass@k, durations, model tokens, the error
histogram, and where the output went."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from osmo_run.run.reporting.stats import MeanEstimate
from osmo_run.run.reporting.summary import RunSummary, UsageSummary


def _bar(count: int, largest: int, width: int = 30) -> str:
    return "█" * max(1, round(width * count / largest)) if largest else ""


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _interval(estimate: MeanEstimate | None) -> str:
    """``95% CI low-high, method``; why there is none when every value was the same;
    else empty."""
    if estimate is None or estimate.ci_low is None or estimate.ci_high is None:
        if estimate is not None and estimate.stderr == 0.0 and estimate.n > 1:
            return "no 95% CI: every value is the same"
        return ""
    method = "" if estimate.method is None else f", {estimate.method}"
    return f"95% CI {_fmt(estimate.ci_low)}–{_fmt(estimate.ci_high)}{method}"


def _confidence_interval(estimate: MeanEstimate | None) -> str:
    """`` ±SE (95% CI low-high, method)``, or as much of it as there is."""
    interval = _interval(estimate)
    stderr = "" if estimate is None or not estimate.stderr else f" ±{_fmt(estimate.stderr, 2)}"
    return stderr + (f" ({interval})" if interval else "")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.1f}ms" if seconds < 1 else f"{seconds:.2f}s"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _usage_text(usage: UsageSummary) -> str:
    rate = usage.completion_tokens_per_sec
    per_rollout = usage.total_per_rollout
    return (
        f"{usage.total_tokens:,} ({usage.prompt_tokens:,} prompt · "
        f"{usage.completion_tokens:,} completion) in {usage.model_calls:,} model calls · "
        f"{_duration(usage.model_sec)} of model time"
        + ("" if rate is None else f" · {rate:,.1f} completion tokens per model second")
        + f"\nper rollout p50 {_count(per_rollout[0])} · p95 {_count(per_rollout[1])} · "
        f"max {_count(per_rollout[2])} tokens (over the {usage.rollouts} that called a model)"
    )


def _passes_text(summary: RunSummary) -> str:
    """How many reached the pass threshold, pass@k with several samples, the interval."""
    rate = summary.pass_rate
    passes = f"{summary.passed}/{summary.total} reached reward ≥ {summary.pass_threshold:g}"
    if rate is not None:
        passes += f" ({rate:.0%})"
    if summary.samples_per_row > 1:
        passes += " · " + " · ".join(f"pass@{k} {_fmt(v)}" for k, v in summary.pass_at_k.items())
    pass_interval = _interval(summary.pass_estimate)
    if pass_interval:
        passes += f"\npass rate {pass_interval}"
    return passes


def _limits_text(limits: list[dict[str, object]]) -> str:
    """Each endpoint's limit over the run, one line each:
    ``http://127.0.0.1:8000 adaptive: min 30 · final 38 of 200 · 429s 12 of 5,210 calls``."""
    lines = []
    for limit in limits:
        lines.append(
            f"{limit['endpoint']} {limit['mode']}: min {limit['min']} · final {limit['final']} "
            f"of {limit['ceiling']} · 429s {limit['throttled']:,} of {limit['calls']:,} calls"
        )
    return "\n".join(lines)


def _stopped_row(summary: RunSummary) -> tuple[str, str]:
    """The summary's row for a run that stopped starting rows: fail-fast's, the
    breaker's or the budget's, with what was not run."""
    trip = summary.breaker
    if summary.budget is not None and trip is None:
        name = "budget"
        stopped = f"stopped sending model calls and starting rows: {summary.budget.reached}"
    elif trip is None:
        name, stopped = "fail-fast", "stopped starting rows after the first failed rollout"
    else:
        name = "breaker"
        stopped = (
            f"stopped starting rows after {trip.after} rollouts in a row failed with "
            f"{trip.category}"
        )
    if summary.not_run:
        stopped += f"; {summary.not_run} rollouts not run, counted as failures by the gates"
    return name, stopped


def render_summary(summary: RunSummary) -> RenderableType:
    """The end-of-run report: statuses, rewards with their uncertainty, coverage, pass
    rate and pass@k, durations, model tokens, the error histogram, and where the output
    went."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    unit = "rollouts" if summary.samples_per_row > 1 else "rows"
    statuses = " · ".join(f"{k} {v}" for k, v in summary.by_status.items()) or "none"
    table.add_row(unit, f"{summary.total} ({statuses})")
    all_interval = _confidence_interval(summary.all_estimate)
    graded_interval = _confidence_interval(summary.graded_estimate)
    table.add_row(
        "reward",
        f"mean {_fmt(summary.mean_reward_all)}{all_interval} over all "
        f"{summary.total} {unit} (no reward = 0)\n"
        f"mean {_fmt(summary.mean_reward_graded)}{graded_interval} over "
        f"{summary.graded} graded · min {_fmt(summary.reward_min)} · "
        f"max {_fmt(summary.reward_max)}",
    )
    coverage = summary.coverage
    table.add_row(
        "coverage",
        f"{summary.graded}/{summary.total} graded"
        + ("" if coverage is None else f" ({coverage:.0%})"),
    )
    table.add_row("passed", _passes_text(summary))
    table.add_row(
        "duration",
        f"p50 {_duration(summary.duration_p50)} · p95 {_duration(summary.duration_p95)} · "
        f"max {_duration(summary.duration_max)}",
    )
    if summary.usage is not None:
        table.add_row("tokens", _usage_text(summary.usage))
    if summary.grader_usage is not None:  # a judge's, apart from the workflows'
        table.add_row("grader tokens", _usage_text(summary.grader_usage))
    if summary.model and summary.model.get("model_limits"):
        table.add_row("model slots", _limits_text(summary.model["model_limits"]))
    if summary.error_categories:
        largest = max(summary.error_categories.values())
        width = max(len(k) for k in summary.error_categories)
        lines = [
            f"{name:<{width}} {count:>6} {_bar(count, largest)}"
            for name, count in summary.error_categories.items()
        ]
        table.add_row("errors", Text("\n".join(lines), style="red"))
    else:
        table.add_row("errors", "none")
    if summary.grader_skipped:
        skipped = " · ".join(f"{k}: {v}" for k, v in summary.grader_skipped.items())
        table.add_row("not graded", skipped)
    if summary.output:
        table.add_row("output", summary.output)
    if summary.stopped_early:
        table.add_row(*_stopped_row(summary))
    title = "Run summary (interrupted)" if summary.interrupted else "Run summary"
    return Group(Text(title, style="bold underline"), table)
