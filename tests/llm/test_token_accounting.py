"""Token accounting: from the endpoint's responses to the rollout's ``usage``, the output
row, the live display and the summary."""

from __future__ import annotations

import asyncio
import io
from types import SimpleNamespace
from typing import Any

from rich.console import Console

from osmo_run import AgentWorkflow, AgentWorkflowConfig, AgentWorkflowContext, LLMUsage
from osmo_run.run.executing.display import LiveDisplay, PlainDisplay
from osmo_run.run.reporting.summary import SummaryBuilder
from osmo_run.run.reporting.summary_text import render_summary
from osmo_run.run.writing.records import OutputRecord, record_dict
from osmo_run.sdk.context import RolloutContext, _current, get_rollout_context
from osmo_run.sdk.llm import record_usage
from osmo_run.sdk.rollout import run_workflow_phase
from osmo_run.sdk.types import ExecutionRequest, ExecutionResult, RolloutSample, RolloutStatus


def _result(
    row: str, usage: LLMUsage | None, status: RolloutStatus = RolloutStatus.SUCCESS
) -> ExecutionResult:
    return ExecutionResult(row, status, sample=RolloutSample(reward=1.0), usage=usage)


def test_usage_adds_calls_and_round_trips() -> None:
    usage = LLMUsage()
    usage.add(10, 4, 0.5)
    usage.add(20, 6, 0.25)
    assert usage.to_dict() == {
        "prompt_tokens": 30,
        "completion_tokens": 10,
        "total_tokens": 40,
        "model_calls": 2,
        "model_sec": 0.75,
        "retried_calls": 0,
    }
    assert LLMUsage.from_dict(usage.to_dict()) == usage
    assert LLMUsage.from_dict(None) is None
    assert LLMUsage.from_dict({"prompt_tokens": "x"}) is None


def test_record_usage_reads_openai_and_agents_shapes_inside_a_rollout_only() -> None:
    record_usage({"prompt_tokens": 5, "completion_tokens": 2}, 0.1)  # outside: nothing happens
    rollout = RolloutContext("r1")
    token = _current.set(rollout)
    try:
        record_usage({"prompt_tokens": 5, "completion_tokens": 2}, 0.1)
        record_usage(SimpleNamespace(input_tokens=7, output_tokens=3), 0.2)
        record_usage(None, 0.3)  # an answer without usage is still a call
    finally:
        _current.reset(token)
    assert (rollout.usage.model_calls, rollout.usage.prompt_tokens) == (3, 12)
    assert rollout.usage.completion_tokens == 5
    assert abs(rollout.usage.model_sec - 0.6) < 1e-9


class _SpendsThenFails(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> list[dict[str, Any]]:
        get_rollout_context().record_llm_call(11, 3, 0.2)
        if ctx.metadata.get("fail"):
            raise RuntimeError("after the model call")
        return [*ctx.prompt, {"role": "assistant", "content": "ok"}]


def _phase(metadata: dict[str, Any]) -> ExecutionResult:
    request = ExecutionRequest("r1", [{"role": "user", "content": "hi"}], metadata=metadata)
    return asyncio.run(run_workflow_phase(request, _SpendsThenFails, AgentWorkflowConfig()))


def test_workflow_phase_reports_usage_on_success_and_failure() -> None:
    for metadata, status in (({}, RolloutStatus.SUCCESS), ({"fail": 1}, RolloutStatus.FAILURE)):
        result = _phase(metadata)
        assert result.status is status
        assert result.usage == LLMUsage(1, 11, 3, 0.2)
        assert ExecutionResult.from_dict(result.to_dict()).usage == result.usage  # sandboxes
    request = ExecutionRequest("r2", [{"role": "user", "content": "hi"}])

    class NoModel(AgentWorkflow):
        async def run(self, ctx: AgentWorkflowContext) -> None:
            return None

    assert asyncio.run(run_workflow_phase(request, NoModel, AgentWorkflowConfig())).usage is None


def test_output_row_holds_usage_or_null() -> None:
    with_usage = record_dict("r1", 0, 1, _result("r1", LLMUsage(2, 30, 10, 0.75)))
    assert with_usage["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 10,
        "total_tokens": 40,
        "model_calls": 2,
        "model_sec": 0.75,
        "retried_calls": 0,
    }
    without = record_dict("r2", 1, 2, _result("r2", None))
    assert without["usage"] is None
    for record in (with_usage, without):
        OutputRecord.model_validate(record)


def test_summary_totals_tokens_and_reports_per_rollout_percentiles() -> None:
    builder = SummaryBuilder()
    for i in range(1, 11):  # rollout i: 100*i prompt tokens, 10*i completion, 1 s of model time
        builder.add_record(
            record_dict(f"r{i}", 0, 1, _result(f"r{i}", LLMUsage(i, 100 * i, 10 * i, 1.0)))
        )
    builder.add_record(record_dict("no-model", 0, 1, _result("no-model", None)))
    builder.add_record(record_dict("from-file", 0, 1, _result("x", LLMUsage(1, 50, 5, 0.5))))
    summary = builder.build()
    usage = summary.usage
    assert usage is not None
    assert (usage.rollouts, usage.model_calls) == (11, 56)
    assert (usage.prompt_tokens, usage.completion_tokens) == (5550, 555)
    saved = summary.to_dict()["usage"]
    assert saved["total_tokens"] == 6105 and saved["model_sec"] == 10.5
    assert saved["completion_tokens_per_model_sec"] == 555 / 10.5
    assert saved["per_rollout"]["prompt_tokens"] == {"p50": 500.0, "p95": 950.0, "max": 1000.0}
    assert saved["per_rollout"]["total_tokens"]["max"] == 1100.0
    assert SummaryBuilder().build().to_dict()["usage"] is None
    text = _render(render_summary(summary))
    assert "tokens    6,105 (5,550 prompt · 555 completion) in 56 model calls" in text
    assert "per rollout p50 550 · p95 1,045 · max 1,100 tokens (over the 11 that called" in text


def _render(renderable: object) -> str:
    stream = io.StringIO()
    Console(file=stream, width=160, color_system=None).print(renderable)
    return stream.getvalue()


def test_displays_show_tokens_and_tokens_per_second_once_a_row_reports_usage() -> None:
    stream = io.StringIO()
    plain = PlainDisplay(stream)
    plain.start(2, "run")
    plain.row_finished(_result("a", None))
    plain.stop()
    assert "tokens" not in stream.getvalue()  # runs without a model look as before
    plain.start(2, "run")
    plain.row_finished(_result("b", LLMUsage(1, 1200, 34, 0.5)))
    plain.stop()
    last = stream.getvalue().splitlines()[-1]
    assert " · 1,234 tokens (34 out) · " in last and last.endswith(" tok/s")

    live = LiveDisplay(Console(file=io.StringIO(), width=160))
    live.row_finished(_result("a", None))
    assert "tokens" not in _render(live)
    live.row_finished(_result("b", LLMUsage(1, 1200, 34, 0.5)))
    lines = _render(live).splitlines()
    assert any("1,234 tokens (34 out)" in line and "tok/s" in line for line in lines)

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.strip("│┃ ").replace("┃", "│").split("│")]

    header = next(line for line in lines if "status" in line and "reward" in line)
    assert cells(header)[-1] == "tokens"  # the last-finished table gains a tokens column
    row_b = next(line for line in lines if cells(line)[0] == "b")
    assert cells(row_b)[-1] == "1,234"
