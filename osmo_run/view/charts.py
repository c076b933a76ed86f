"""The run summary as bar charts: what each bar is, how long, and where a click goes.

The statistics come from :class:`~osmo_run.run.reporting.summary.RunSummary` (the same numbers as
``osmo-run report``) and from the index's columns; the templates draw the bars as inline
SVG (``_macros.html``), so the charts need no script and no library, in the server's pages
and in the exported file alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from osmo_run.run.reporting.stats import percentile
from osmo_run.run.reporting.summary import RunSummary
from osmo_run.view.index import RowIndex


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    text: str
    """The value as printed beside the bar."""
    href: str | None = None
    tone: str = "neutral"
    """A CSS class: ``ok``, ``bad``, ``warn`` or ``neutral``."""


@dataclass
class BarChart:
    title: str
    bars: list[Bar] = field(default_factory=list)
    note: str = ""
    empty: str = "nothing to show"

    @property
    def peak(self) -> float:
        return max((b.value for b in self.bars), default=0.0) or 1.0

    def fraction(self, bar: Bar) -> float:
        """The bar's length as a share of the longest (0..1)."""
        return max(bar.value, 0.0) / self.peak


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.1f} ms"
    if value < 120:
        return f"{value:.2f} s"
    return f"{value / 60:.1f} min"


def fmt_number(value: float | None, digits: int = 3) -> str:
    if value is None or value != value:
        return "-"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.{digits}g}"


def status_chart(
    summary: RunSummary,
    href: Callable[[str], str] | None = None,
    not_passing: int = 0,
    not_passing_href: str | None = None,
) -> BarChart:
    """Rollouts by status, with ``not_passing`` (successes rewarded below the pass
    threshold: wrong answers) as a bar of its own after ``failure``, so one click on
    either lists the rows that did not pass."""
    tones = {"success": "ok", "failure": "bad", "cancelled": "warn"}
    chart = BarChart("Rollouts by status")
    for status in ("success", "failure", "cancelled"):
        n = summary.by_status.get(status, 0)
        if n:
            link = href(status) if href else None
            chart.bars.append(Bar(status, n, f"{n:,}", link, tones[status]))
        if status == "failure" and not_passing:
            chart.bars.append(
                Bar("not passing", not_passing, f"{not_passing:,}", not_passing_href, "warn")
            )
    return chart


def category_chart(summary: RunSummary, href: Callable[[str], str] | None = None) -> BarChart:
    chart = BarChart("Error categories", empty="no failed rollouts")
    for name, n in summary.error_categories.items():
        chart.bars.append(Bar(name, n, f"{n:,}", href(name) if href else None, "bad"))
    return chart


def graded_rewards(index: RowIndex) -> list[float]:
    """Rewards of successful rollouts, sorted (a failed rollout's reward does not count)."""
    cols = index.cols
    return sorted(r for r, s in zip(cols.reward, cols.status, strict=True) if s == 0 and r == r)


@dataclass(frozen=True)
class RewardBin:
    label: str
    low: float
    high: float
    count: int


def reward_bins(rewards: list[float], bins: int = 10) -> list[RewardBin]:
    """A histogram of ``rewards`` (sorted): one bin per value when there are few distinct
    values (0/1 rewards), else ``bins`` equal-width bins."""
    if not rewards:
        return []
    distinct = Counter(rewards)
    if len(distinct) <= 12:
        return [RewardBin(fmt_number(v), v, v, distinct[v]) for v in sorted(distinct)]
    low, high = rewards[0], rewards[-1]
    width = (high - low) / bins
    counts = [0] * bins
    for value in rewards:
        counts[min(int((value - low) / width), bins - 1)] += 1
    edges = [(low + i * width, low + (i + 1) * width) for i in range(bins)]
    return [
        RewardBin(f"{fmt_number(a)}–{fmt_number(b)}", a, b, n)
        for (a, b), n in zip(edges, counts, strict=True)
    ]


def reward_chart(
    bins: list[RewardBin], href: Callable[[float, float], str] | None = None
) -> BarChart:
    chart = BarChart("Reward distribution (graded rollouts)", empty="no graded rollouts")
    for b in bins:
        link = href(b.low, b.high) if href else None
        chart.bars.append(Bar(b.label, b.count, f"{b.count:,}", link, "neutral"))
    return chart


QUANTILES = ((0.5, "p50"), (0.9, "p90"), (0.95, "p95"), (0.99, "p99"))


def duration_quantiles(seconds: list[float]) -> list[tuple[str, float]]:
    """Percentiles and the maximum of rollout durations (``seconds`` sorted)."""
    if not seconds:
        return []
    points = [(name, percentile(seconds, q) or 0.0) for q, name in QUANTILES]
    return [*points, ("max", seconds[-1])]


def duration_chart(quantiles: list[tuple[str, float]]) -> BarChart:
    chart = BarChart("Duration per rollout", empty="no rollouts yet")
    chart.bars = [Bar(name, value, fmt_seconds(value)) for name, value in quantiles]
    return chart


def token_chart(summary: RunSummary) -> BarChart:
    """Per-rollout token percentiles from the summary's usage (rollouts that called a model)."""
    chart = BarChart("Tokens per rollout", empty="no rollout reported model usage")
    usage = summary.usage
    if usage is None:
        return chart
    chart.note = (
        f"{usage.total_tokens:,} tokens in {usage.model_calls:,} model calls over "
        f"{usage.rollouts:,} rollouts"
    )
    for kind, spread in (
        ("prompt", usage.prompt_per_rollout),
        ("completion", usage.completion_per_rollout),
        ("total", usage.total_per_rollout),
    ):
        for name, value in zip(("p50", "p95", "max"), spread, strict=True):
            if value is not None:
                chart.bars.append(Bar(f"{kind} {name}", value, fmt_number(value)))
    return chart
