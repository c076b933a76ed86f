"""What a person sees while a run goes and when it ends.

The runner talks to a :class:`Display`; :func:`make_display` picks the live table on a
terminal and plain lines elsewhere (CI logs), so the runner never knows which.
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from osmo_run.backends.base import ProgressPhase
from osmo_run.run.reporting.stats import MeanEstimate
from osmo_run.run.reporting.summary import RunSummary, UsageSummary
from osmo_run.run.writing.text import one_line
from osmo_run.sdk.types import ExecutionResult, RolloutStatus


@dataclass
class _InFlight:
    started: float
    phase: str
    """The phase name the backend reported, or the text of a retry in waiting."""
    retry_at: float | None = None
    model_wait: bool = False
    """A model call of the row waits for a slot under its endpoint's limit."""

    def phase_text(self, now: float) -> str:
        """The phase as shown; a row waiting to retry counts down to its next try."""
        if self.retry_at is None:
            return self.phase + (", waiting for a model slot" if self.model_wait else "")
        return f"{self.phase}, next try in {max(self.retry_at - now, 0.0):.1f}s"


_STATUS_STYLE = {"success": "green", "failure": "red", "cancelled": "yellow"}


class Display:
    """Receives run events on the event loop thread; every method must return quickly.

    This base shows nothing; a display overrides the events it shows.
    """

    def start(self, total: int, description: str) -> None:
        """The run starts ``total`` rollouts; ``description`` says what runs where."""

    def admitted(self, count: int = 1) -> None:
        """``count`` more rollouts joined the run (``osmo-run serve`` admitted them): the
        run's total grows."""

    def row_started(self, row_id: str) -> None:
        """A rollout was dispatched to the backend."""

    def row_phase(self, row_id: str, phase: str) -> None:
        """An in-flight rollout entered ``phase`` (a name the backend declares: shown as is)."""

    def row_retrying(
        self,
        row_id: str,
        attempt: int,
        max_attempts: int,
        delay_sec: float,
        failed: ExecutionResult,
    ) -> None:
        """``failed`` is retried as try ``attempt`` of ``max_attempts`` in ``delay_sec``."""

    def row_finished(self, result: ExecutionResult) -> None:
        """A rollout's final result was recorded."""

    def row_waiting_for_model(self, row_id: str, waiting: bool) -> None:
        """A model call of an in-flight rollout started (``True``) or stopped waiting for a
        slot under its endpoint's limit."""

    def message(self, text: str) -> None:
        """A line for the person watching (an interrupt, fail-fast, the breaker), shown
        as it is: never read as markup."""

    def tick(self) -> None:
        """About once a second, for displays that print on a clock."""

    model_status: Callable[[], str | None] | None = None
    """The run's model layer's words for the counters line (``model slots 37/200 · 429s
    12``): set by the run, read by the displays that show counters."""

    def _model_text(self) -> str | None:
        status = self.model_status
        return None if status is None else status()

    def stop(self) -> None:
        """The run is over (also after an interrupt); leave the terminal as it was."""


class _Counts:
    def __init__(self) -> None:
        self.total = 0
        self.done = 0
        self.ok = 0
        self.failed = 0
        self.categories: Counter[str] = Counter()
        self.started_at = time.monotonic()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.grader_prompt_tokens = 0
        self.grader_completion_tokens = 0

    def add(self, result: ExecutionResult) -> None:
        if result.usage is not None:
            self.prompt_tokens += result.usage.prompt_tokens
            self.completion_tokens += result.usage.completion_tokens
        if result.grader_usage is not None:  # a judge's tokens, shown apart
            self.grader_prompt_tokens += result.grader_usage.prompt_tokens
            self.grader_completion_tokens += result.grader_usage.completion_tokens
        self.done += 1
        if result.status is RolloutStatus.SUCCESS:
            self.ok += 1
        else:
            self.failed += 1
        if result.error_category is not None:
            self.categories[result.error_category.value] += 1

    def line(self, model: str | None = None) -> str:
        """The counters; ``model`` (the model layer's status) goes after them."""
        elapsed = time.monotonic() - self.started_at
        rate = self.done / elapsed if elapsed > 0 else 0.0
        line = (
            f"{self.done}/{self.total} done · {self.ok} ok · {self.failed} failed · "
            f"{rate:,.1f} rows/s · {elapsed:,.0f}s"
        )
        if self.prompt_tokens or self.completion_tokens:
            tokens = self.prompt_tokens + self.completion_tokens
            per_sec = tokens / elapsed if elapsed > 0 else 0.0
            line += f" · {tokens:,} tokens ({self.completion_tokens:,} out) · {per_sec:,.1f} tok/s"
        if self.grader_prompt_tokens or self.grader_completion_tokens:
            tokens = self.grader_prompt_tokens + self.grader_completion_tokens
            line += f" · grader {tokens:,} tokens ({self.grader_completion_tokens:,} out)"
        if model:
            line += f" · {model}"
        return line


class NullDisplay(Display):
    """Shows nothing (``--display none``, benchmarks)."""


class PlainDisplay(Display):
    """Plain lines, no control codes: a progress line every ``interval_sec`` and one line per
    failed row (the first ``max_failure_lines``)."""

    def __init__(
        self, stream: IO[str], interval_sec: float = 5.0, max_failure_lines: int = 20
    ) -> None:
        self._stream = stream
        self._interval = interval_sec
        self._max_failures = max_failure_lines
        self._counts = _Counts()
        self._next_progress = 0.0
        self._failure_lines = 0

    def _print(self, text: str) -> None:
        self._stream.write(text + "\n")
        self._stream.flush()

    def start(self, total: int, description: str) -> None:
        self._counts = _Counts()
        self._counts.total = total
        self._next_progress = time.monotonic() + self._interval
        self._print(description)

    def admitted(self, count: int = 1) -> None:
        self._counts.total += count

    def row_retrying(
        self,
        row_id: str,
        attempt: int,
        max_attempts: int,
        delay_sec: float,
        failed: ExecutionResult,
    ) -> None:
        category = failed.error_category.value if failed.error_category else "-"
        self._print(
            f"RETRY row {one_line(row_id)} (attempt {attempt}/{max_attempts} in "
            f"{delay_sec:.1f}s) after {category}: {one_line(failed.error_message or '')}"
        )

    def row_finished(self, result: ExecutionResult) -> None:
        self._counts.add(result)
        if result.status is not RolloutStatus.SUCCESS:
            self._failure_lines += 1
            if self._failure_lines <= self._max_failures:
                category = result.error_category.value if result.error_category else "-"
                phase = result.error_phase.value if result.error_phase else "-"
                full = result.backend.error_log
                self._print(
                    f"{result.status.value.upper()} row {one_line(result.rollout_id)} "
                    f"[{category}, {phase}]: {one_line(result.error_message or '')}"
                    + (f" (full text: {one_line(str(full))})" if full else "")
                )
            elif self._failure_lines == self._max_failures + 1:
                self._print("(further failed rows are in the output file only)")
        self.tick()

    def message(self, text: str) -> None:
        self._print("\n".join(one_line(line) for line in text.splitlines()))

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self._next_progress:
            self._next_progress = now + self._interval
            self._print("progress: " + self._counts.line(self._model_text()))

    def stop(self) -> None:
        self._print("finished: " + self._counts.line(self._model_text()))


class LiveDisplay(Display):
    """A rich live table: counters, rows in flight with phase and elapsed time, and the
    last finished rows. Rendering happens on rich's refresh thread from a snapshot of the
    state, so per-row events cost a dictionary update."""

    def __init__(self, console: Console, max_in_flight_rows: int = 8, recent_rows: int = 8) -> None:
        self._console = console
        self._max_in_flight = max_in_flight_rows
        self._counts = _Counts()
        self._in_flight: dict[str, _InFlight] = {}
        self._recent: deque[ExecutionResult] = deque(maxlen=recent_rows)
        self._description = ""
        self._live: Live | None = None

    def __rich__(self) -> RenderableType:
        counts = self._counts
        header = Text(self._description, style="bold")
        progress = Text(counts.line(self._model_text()))
        now = time.monotonic()
        in_flight = sorted(self._in_flight.copy().items(), key=lambda item: item[1].started)
        running = Table(title=f"in flight ({len(in_flight)})", title_justify="left", expand=False)
        running.add_column("row", max_width=40)
        running.add_column("phase")
        running.add_column("elapsed", justify="right")
        for row_id, entry in in_flight[: self._max_in_flight]:
            running.add_row(_id_cell(row_id), entry.phase_text(now), f"{now - entry.started:.1f}s")
        if len(in_flight) > self._max_in_flight:
            running.add_row(f"… {len(in_flight) - self._max_in_flight} more", "", "")
        recent = Table(title="last finished", title_justify="left")
        recent.add_column("row", max_width=40)
        recent.add_column("status")
        recent.add_column("reward", justify="right")
        recent.add_column("category")
        recent.add_column("time", justify="right")
        with_tokens = bool(counts.prompt_tokens or counts.completion_tokens)
        if with_tokens:
            recent.add_column("tokens", justify="right")
        with_grader_tokens = bool(counts.grader_prompt_tokens or counts.grader_completion_tokens)
        if with_grader_tokens:
            recent.add_column("grader tokens", justify="right")
        for result in list(self._recent):
            grader = result.grader_usage
            status = result.status.value
            reward = "-" if result.reward is None else f"{result.reward:g}"
            category = result.error_category.value if result.error_category else ""
            cells: list[RenderableType] = [
                _id_cell(result.rollout_id),
                Text(status, style=_STATUS_STYLE.get(status, "")),
                reward,
                category,
                f"{result.timings.total_sec:.2f}s",
            ]
            for shown, usage in ((with_tokens, result.usage), (with_grader_tokens, grader)):
                if shown:
                    cells.append("-" if usage is None else f"{usage.total_tokens:,}")
            recent.add_row(*cells)
        histogram = ", ".join(f"{k} {v}" for k, v in counts.categories.most_common())
        parts: list[RenderableType] = [header, progress]
        if histogram:
            parts.append(Text("errors: " + histogram, style="red"))
        parts += [running, recent]
        return Group(*parts)

    def start(self, total: int, description: str) -> None:
        self._counts = _Counts()
        self._counts.total = total
        self._description = description
        self._live = Live(self, console=self._console, refresh_per_second=4, transient=False)
        self._live.start()

    def admitted(self, count: int = 1) -> None:
        self._counts.total += count

    def row_started(self, row_id: str) -> None:
        self._in_flight[row_id] = _InFlight(time.monotonic(), ProgressPhase.QUEUED)

    def row_phase(self, row_id: str, phase: str) -> None:
        entry = self._in_flight.get(row_id)
        if entry is not None:
            entry.phase = phase
            entry.retry_at = None

    def row_retrying(
        self,
        row_id: str,
        attempt: int,
        max_attempts: int,
        delay_sec: float,
        failed: ExecutionResult,
    ) -> None:
        entry = self._in_flight.get(row_id)
        if entry is not None:
            category = failed.error_category.value if failed.error_category else "failure"
            entry.phase = f"retry {attempt}/{max_attempts} after {category}"
            entry.retry_at = time.monotonic() + delay_sec

    def row_waiting_for_model(self, row_id: str, waiting: bool) -> None:
        entry = self._in_flight.get(row_id)
        if entry is not None:
            entry.model_wait = waiting

    def row_finished(self, result: ExecutionResult) -> None:
        self._in_flight.pop(result.rollout_id, None)
        self._recent.append(result)
        self._counts.add(result)

    def message(self, text: str) -> None:
        # plain text: a breaker's line quotes an error message, whose "[/tmp]" is no markup
        lines = "\n".join(one_line(line) for line in text.splitlines())
        self._console.print(lines, markup=False, highlight=False)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def _id_cell(row_id: str) -> Text:
    """A row id as a table cell: as it is but with control characters visible, never read
    as rich markup (``[red]`` is an id like any other), cut at the cell's edge."""
    return Text(one_line(row_id), no_wrap=True, overflow="ellipsis")


def make_display(kind: str, console: Console) -> Display:
    """``live`` on a terminal, ``plain`` elsewhere, or as asked (``live``/``plain``/``none``)."""
    if kind == "none":
        return NullDisplay()
    if kind == "live" or (kind == "auto" and redraws(console)):
        return LiveDisplay(console)
    return PlainDisplay(console.file)


def redraws(console: Console) -> bool:
    """Whether ``auto`` may redraw a live table on ``console``: an interactive terminal
    (``TTY_INTERACTIVE=0`` or ``1`` decides, as in rich). ``FORCE_COLOR`` makes rich take a
    pipe for a terminal; it asks for colours, not for frames redrawn into a log."""
    if os.environ.get("TTY_INTERACTIVE") in {"0", "1"}:
        return console.is_interactive
    isatty = getattr(console.file, "isatty", None)
    try:
        return console.is_interactive and bool(isatty is not None and isatty())
    except ValueError:  # a closed file
        return False


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
