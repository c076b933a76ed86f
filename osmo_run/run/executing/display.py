"""What a person sees while a run goes.

The runner talks to a :class:`Display`; :func:`make_display` picks the live table on a
terminal and plain lines elsewhere (CI logs), so the runner never knows which. The summary
printed when a run ends is :mod:`osmo_run.run.reporting.summary_text`'s.
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
