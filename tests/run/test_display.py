"""What a person sees: plain lines without control codes, the live table, the summary."""

from __future__ import annotations

import asyncio
import io

import pytest
from rich.console import Console

from osmo_run import ErrorCategory, ExecutionResult, Phase, RolloutSample, RolloutStatus
from osmo_run.backends.base import ProgressPhase
from osmo_run.run.executing.display import (
    LiveDisplay,
    NullDisplay,
    PlainDisplay,
    make_display,
)
from osmo_run.run.reporting.summary import RunSummary
from osmo_run.run.reporting.summary_text import render_summary
from osmo_run.sdk.context import RolloutContext, _current
from osmo_run.sdk.model_layer import ModelLayer, model_call, use_model_layer
from osmo_run.sdk.model_limits import ModelLimits


def _ok(row_id: str = "ok-1") -> ExecutionResult:
    return ExecutionResult(row_id, RolloutStatus.SUCCESS, sample=RolloutSample(reward=1.0))


def _failed(row_id: str = "bad-1") -> ExecutionResult:
    return ExecutionResult(
        row_id,
        RolloutStatus.FAILURE,
        error_category=ErrorCategory.AGENT_ERROR,
        error_message="ZeroDivisionError: division by zero (at calc.py:4 in run)",
        error_phase=Phase.WORKFLOW,
    )


def _render(renderable: object, terminal: bool = False) -> str:
    stream = io.StringIO()
    console = Console(file=stream, width=120, force_terminal=terminal, color_system=None)
    console.print(renderable)
    return stream.getvalue()


def test_plain_display_prints_failures_and_totals_without_control_codes() -> None:
    stream = io.StringIO()
    display = PlainDisplay(stream)
    display.start(3, "osmo-run local data.jsonl · 3 rows")
    display.row_started("ok-1")
    display.row_finished(_ok())
    display.row_finished(_failed())
    display.message("Interrupted: cancelling rows in flight")
    display.stop()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "osmo-run local data.jsonl · 3 rows"
    assert lines[1] == (
        "FAILURE row bad-1 [agent_error, workflow]: "
        "ZeroDivisionError: division by zero (at calc.py:4 in run)"
    )
    assert lines[2] == "Interrupted: cancelling rows in flight"
    assert lines[3].startswith("finished: 2/3 done · 1 ok · 1 failed · ")
    assert len(lines) == 4
    assert "\x1b" not in stream.getvalue()


def test_plain_display_caps_failure_lines_and_says_so() -> None:
    stream = io.StringIO()
    display = PlainDisplay(stream, max_failure_lines=2)
    display.start(5, "run")
    for i in range(5):
        display.row_finished(_failed(f"bad-{i}"))
    lines = stream.getvalue().splitlines()
    assert [line.split(" [")[0] for line in lines[1:3]] == [
        "FAILURE row bad-0",
        "FAILURE row bad-1",
    ]
    assert lines[3:] == ["(further failed rows are in the output file only)"]


def test_plain_display_prints_progress_once_per_interval() -> None:
    stream = io.StringIO()
    display = PlainDisplay(stream, interval_sec=0.0)
    display.start(2, "run")
    display.row_finished(_ok())
    assert stream.getvalue().splitlines()[-1].startswith("progress: 1/2 done · 1 ok · 0 failed")
    quiet = io.StringIO()
    slow = PlainDisplay(quiet, interval_sec=3600)
    slow.start(2, "run")
    slow.row_finished(_ok())
    slow.tick()
    assert quiet.getvalue() == "run\n"


@pytest.mark.parametrize(
    ("kind", "terminal", "expected"),
    [
        ("none", True, NullDisplay),
        ("plain", True, PlainDisplay),
        ("live", False, LiveDisplay),
        ("auto", True, LiveDisplay),
        ("auto", False, PlainDisplay),
    ],
)
def test_display_kind_follows_the_flag_and_the_terminal(
    kind: str, terminal: bool, expected: type
) -> None:
    console = Console(file=_Terminal() if terminal else io.StringIO(), force_terminal=terminal)
    assert isinstance(make_display(kind, console), expected)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_redraws_no_live_table_into_a_pipe_that_force_color_makes_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("TTY_INTERACTIVE", raising=False)
    piped = Console(file=io.StringIO())
    assert piped.is_terminal  # rich's reading of FORCE_COLOR
    assert isinstance(make_display("auto", piped), PlainDisplay)
    monkeypatch.setenv("TTY_INTERACTIVE", "1")  # asked for by name: frames it is
    assert isinstance(make_display("auto", Console(file=io.StringIO())), LiveDisplay)


def test_live_display_shows_rows_in_flight_with_their_phase_and_recent_results() -> None:
    display = LiveDisplay(Console(file=io.StringIO()))
    display.row_started("row-a")
    display.row_started("row-b")
    display.row_phase("row-a", "grading")
    display.row_finished(_failed("row-b"))
    text = _render(display)
    assert "in flight (1)" in text
    assert "row-a" in text and "grading" in text
    assert "row-b" in text and "failure" in text and "agent_error" in text
    assert "errors: agent_error 1" in text


def _run_summary(interrupted: bool = False) -> RunSummary:
    return RunSummary(
        total=4,
        by_status={"success": 2, "failure": 2},
        error_categories={"timeout": 2},
        graded=2,
        reward_sum=1.5,
        reward_min=0.5,
        reward_max=1.0,
        duration_p50=0.5,
        duration_p95=1.0,
        duration_max=1.2,
        grader_skipped={"row has no label": 1},
        output="runs/x/results.jsonl",
        interrupted=interrupted,
    )


def test_summary_reports_both_means_the_histogram_and_the_output() -> None:
    text = _render(render_summary(_run_summary()))
    assert text.startswith("Run summary\n")
    assert "4 (success 2 · failure 2)" in text
    assert "mean 0.375 over all 4 rows (no reward = 0)" in text
    assert "mean 0.75 over 2 graded" in text
    assert "timeout      2 " in text
    assert "row has no label: 1" in text
    assert "runs/x/results.jsonl" in text


def test_interrupted_summary_says_so() -> None:
    assert _render(render_summary(_run_summary(interrupted=True))).startswith(
        "Run summary (interrupted)"
    )


def test_live_display_messages_are_text_never_markup() -> None:
    """A breaker's line quotes an error message: its brackets are shown, not parsed."""
    out = io.StringIO()
    live = LiveDisplay(Console(file=out, width=200))
    live.message("breaker: 5 rollouts in a row failed with infra_error (KeyError: [/tmp] [red]x)")
    assert "(KeyError: [/tmp] [red]x)" in out.getvalue()


def test_live_table_shows_ids_as_they_are_with_control_characters_visible() -> None:
    display = LiveDisplay(Console(file=io.StringIO(), width=120, color_system=None))
    display.start(3, "osmo-run local data.jsonl · 3 rows")
    display.row_started("[red]in flight[/red]")
    display.row_finished(_ok("gsm8k/train/17"))
    display.row_finished(_ok("esc\x1b[2Jnul\x00"))
    shown = _render(display)
    assert "[red]in flight[/red]" in shown  # an id, not markup
    assert "gsm8k/train/17" in shown
    assert "esc\\x1b[2Jnul\\x00" in shown
    assert "\x1b" not in shown and "\x00" not in shown


def test_live_display_shows_rows_waiting_for_a_model_slot_and_the_endpoints_limit() -> None:
    """Through the real model layer: a row whose call waits under its endpoint's limit says
    so in its phase, and the counters line shows the limit, the waiting and the 429s."""
    display = LiveDisplay(Console(file=io.StringIO()))
    limits = ModelLimits(8)
    limits.fix("http://127.0.0.1:9/v1", 1)
    layer = ModelLayer(limits)
    display.model_status = layer.status
    layer.on_wait = display.row_waiting_for_model
    shown: list[str] = []

    async def row(row_id: str, hold: asyncio.Event, entered: asyncio.Event) -> None:
        _current.set(RolloutContext(rollout_id=row_id))
        display.row_started(row_id)
        display.row_phase(row_id, ProgressPhase.WORKFLOW)
        async with model_call("http://127.0.0.1:9/v1/chat/completions"):
            entered.set()
            await hold.wait()

    async def main() -> None:
        use_model_layer(layer)
        release, first_in, second_in = asyncio.Event(), asyncio.Event(), asyncio.Event()
        first = asyncio.ensure_future(row("row-a", release, first_in))
        await first_in.wait()
        second = asyncio.ensure_future(row("row-b", release, second_in))
        await asyncio.sleep(0.01)
        shown.append(_render(display))
        release.set()
        await asyncio.gather(first, second)
        shown.append(_render(display))

    asyncio.run(main())
    waiting, after = shown
    assert "model slots 1/1 fixed · 1 waiting · 429s 0" in waiting
    (line,) = [line for line in waiting.splitlines() if "row-b" in line]
    assert "workflow, waiting for a model slot" in line
    (line,) = [line for line in waiting.splitlines() if "row-a" in line]
    assert "waiting" not in line
    assert "waiting for a model slot" not in after and "model slots 1/1 fixed · 429s 0" in after
