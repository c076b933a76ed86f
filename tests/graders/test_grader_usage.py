"""What a grader spends on its model is counted apart from the workflow's: the result's
``grader_usage``, through its (de)serialization, in the summary and in the displays.

(End to end, through the CLI and child processes: tests/graders/test_judge_section.py;
through Harbor trials: tests/graders/test_harbor.py.)
"""

from __future__ import annotations

import asyncio
import io

import pytest
from rich.console import Console

from osmo_run import ExecutionResult, Grader, GraderContext, RolloutSample, RolloutStatus
from osmo_run.run.executing.display import LiveDisplay, PlainDisplay
from osmo_run.run.reporting.summary import SummaryBuilder
from osmo_run.run.reporting.summary_text import render_summary
from osmo_run.run.writing.records import OutputRecord, record_dict
from osmo_run.sdk.config import GraderConfig
from osmo_run.sdk.context import get_rollout_context
from osmo_run.sdk.rollout import run_grader_phase
from osmo_run.sdk.types import LLMUsage
from osmo_run.testing import make_request, run_grader

MESSAGES = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


class CountingGrader(Grader):
    """Reports two model calls of its own client, as any grader may."""

    async def grade(self, ctx: GraderContext) -> float:
        rollout = get_rollout_context()  # the grader phase's own context
        rollout.record_llm_call(300, 20, 0.5)
        rollout.record_llm_call(100, 10, 0.25)
        return 1.0


class SilentGrader(Grader):
    async def grade(self, ctx: GraderContext) -> float:
        return 0.5


def _result(rollout_id: str, usage: LLMUsage | None, grader: LLMUsage | None) -> ExecutionResult:
    return ExecutionResult(
        rollout_id,
        RolloutStatus.SUCCESS,
        sample=RolloutSample(reward=1.0),
        usage=usage,
        grader_usage=grader,
    )


def test_a_graders_model_calls_are_its_own_usage_not_the_workflows() -> None:
    workflow_usage = LLMUsage(1, 40, 4, 0.1)
    sample = RolloutSample(list(MESSAGES))
    done = ExecutionResult("r", RolloutStatus.SUCCESS, sample=sample, usage=workflow_usage)
    request = make_request(MESSAGES, label="a")
    graded = asyncio.run(run_grader_phase(request, done, CountingGrader, GraderConfig()))
    assert graded.reward == 1.0
    assert graded.usage == LLMUsage(1, 40, 4, 0.1)  # the workflow's, untouched
    assert graded.grader_usage == LLMUsage(2, 400, 30, 0.75)
    # one (de)serialization: the record, a sandbox's result file, a regrade's input
    again = ExecutionResult.from_dict(graded.to_dict())
    assert (again.usage, again.grader_usage) == (graded.usage, graded.grader_usage)
    record = record_dict("r", 0, 1, graded)
    OutputRecord.model_validate(record)
    assert record["grader_usage"] == {
        "prompt_tokens": 400,
        "completion_tokens": 30,
        "total_tokens": 430,
        "model_calls": 2,
        "model_sec": 0.75,
        "retried_calls": 0,
    }
    # grading again with a grader that calls no model leaves no earlier grader's usage
    regraded = asyncio.run(run_grader_phase(request, again, SilentGrader, GraderConfig()))
    assert regraded.grader_usage is None and regraded.usage == workflow_usage
    assert record_dict("r", 0, 1, regraded)["grader_usage"] is None


def test_a_grader_without_model_calls_reports_no_usage() -> None:
    graded = asyncio.run(run_grader(SilentGrader, MESSAGES, "a"))
    assert graded.reward == 0.5 and graded.grader_usage is None


def test_the_summary_totals_grader_usage_apart_with_per_rollout_percentiles() -> None:
    builder = SummaryBuilder()
    for i in range(1, 11):  # rollout i: the workflow 100*i + 10*i tokens, the judge 50*i + 5*i
        usage = LLMUsage(1, 100 * i, 10 * i, 1.0)
        builder.add_record(
            record_dict(f"r{i}", 0, 1, _result(f"r{i}", usage, LLMUsage(i, 50 * i, 5 * i, 0.5)))
        )
    builder.add_record(record_dict("ungraded", 0, 1, _result("u", LLMUsage(1, 1, 1, 0.1), None)))
    summary = builder.build()
    assert summary.usage is not None and summary.grader_usage is not None
    assert (summary.usage.rollouts, summary.usage.model_calls) == (11, 11)
    judge = summary.to_dict()["grader_usage"]
    assert (judge["rollouts"], judge["model_calls"], judge["total_tokens"]) == (10, 55, 3025)
    spread = judge["per_rollout"]["prompt_tokens"]
    assert (spread["p50"], spread["max"]) == (275.0, 500.0)
    assert spread["p95"] == pytest.approx(477.5)
    assert SummaryBuilder().build().to_dict()["grader_usage"] is None
    text = _render(render_summary(summary))
    assert "tokens         6,052 (5,501 prompt · 551 completion) in 11 model calls" in text
    assert "grader tokens  3,025 (2,750 prompt · 275 completion) in 55 model calls" in text


def _render(renderable: object) -> str:
    stream = io.StringIO()
    Console(file=stream, width=160, color_system=None).print(renderable)
    return stream.getvalue()


def test_the_displays_show_the_judges_tokens_apart_from_the_agents() -> None:
    stream = io.StringIO()
    plain = PlainDisplay(stream)
    plain.start(1, "run")
    plain.row_finished(_result("a", LLMUsage(1, 1200, 34, 0.5), LLMUsage(2, 500, 60, 0.5)))
    plain.stop()
    last = stream.getvalue().splitlines()[-1]
    assert " · 1,234 tokens (34 out) · " in last
    assert last.endswith(" tok/s · grader 560 tokens (60 out)")

    live = LiveDisplay(Console(file=io.StringIO(), width=160))
    live.row_finished(_result("a", LLMUsage(1, 1200, 34, 0.5), None))
    assert "grader" not in _render(live)  # a run without a judge looks as before
    live.row_finished(_result("b", None, LLMUsage(2, 500, 60, 0.5)))
    lines = _render(live).splitlines()

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.strip("│┃ ").replace("┃", "│").split("│")]

    header = next(line for line in lines if "status" in line and "reward" in line)
    assert cells(header)[-2:] == ["tokens", "grader tokens"]
    assert cells(next(line for line in lines if cells(line)[0] == "a"))[-2:] == ["1,234", "-"]
    assert cells(next(line for line in lines if cells(line)[0] == "b"))[-2:] == ["-", "560"]


class AskingGrader(Grader):
    """Calls the judge through ``chat_completion`` with no endpoint of its own."""

    async def grade(self, ctx: GraderContext) -> float:
        from osmo_run.sdk.llm import chat_completion

        await chat_completion([{"role": "user", "content": "right?"}])
        return 1.0


def test_a_grader_calling_a_model_without_a_judge_section_is_told_to_add_one() -> None:
    graded = asyncio.run(run_grader(AskingGrader, MESSAGES, "a"))
    assert graded.error_category is not None and graded.error_category.value == "validation_error"
    assert graded.error_message is not None
    assert "(for a grader's calls: a 'judge' section)" in graded.error_message
