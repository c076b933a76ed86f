"""The Strands Agents integration: Strands' real agent loop, its conversation as the
rollout's sample, and its usage in the rollout's accounting.

Against the embedded model the loop runs for real but SmolLM2 never calls a tool; the
tool-call path runs the same real loop (streaming, as Strands does by default) against a
scripted endpoint, and the conversion is also fed Strands' own message structures.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.llm.conftest import require_extra
from tests.llm.stub_model import StubModel

require_extra("strands", "strands")

from strands import tool  # noqa: E402
from strands.types.content import Messages  # noqa: E402
from strands.types.exceptions import MaxTokensReachedException  # noqa: E402

from osmo_run import AgentWorkflow, AgentWorkflowConfig, AgentWorkflowContext  # noqa: E402
from osmo_run.integrations.strands import (  # noqa: E402
    RolloutAgent,
    chat_messages,
    rollout_model,
    strands_prompt,
)
from osmo_run.sdk.context import LLMEndpoint, RolloutContext, _current  # noqa: E402
from osmo_run.sdk.rollout import run_workflow_phase  # noqa: E402
from osmo_run.sdk.types import ExecutionRequest, ExecutionResult, RolloutStatus  # noqa: E402

QUESTION = "What is 17 + 25? Use the add tool."
SYSTEM = "Call the add tool to add numbers, then give the result."


@tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


class AddStrandsWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> None:
        model = rollout_model(params={"temperature": 0.0, "max_tokens": 48})
        agent = RolloutAgent(ctx.prompt, tools=[add], model=model)
        try:
            await agent.invoke_async()
        except MaxTokensReachedException:
            pass  # the small model rambled: the truncated turn is in the conversation


def _run(llm: LLMEndpoint) -> ExecutionResult:
    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    request = ExecutionRequest("strands-1", prompt)
    return asyncio.run(run_workflow_phase(request, AddStrandsWorkflow, AgentWorkflowConfig(), llm))


@pytest.mark.slow
def test_real_agent_loop_against_the_embedded_model(embedded_llm: LLMEndpoint) -> None:
    result = _run(embedded_llm)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    messages = result.sample.messages
    json.dumps(messages)  # the output file can hold it
    assert messages[:2] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
    ]
    final = messages[-1]
    assert final["role"] == "assistant"
    assert isinstance(final["content"], str) and final["content"].strip()
    calls = [
        c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []
    ]
    assert calls == [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    metrics = result.sample.metrics
    assert metrics["model_calls"] >= 1 and metrics["tool_calls"] == len(calls)
    assert metrics["prompt_tokens"] > 0 and metrics["completion_tokens"] > 0
    assert result.usage is not None and result.usage.model_sec > 0
    assert result.usage.total_tokens == metrics["total_tokens"]


def test_tool_calls_and_results_become_the_sample(stub_model: StubModel) -> None:
    result = _run(stub_model.endpoint)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    system, user, call, tool_result, final = result.sample.messages
    assert (system["content"], user["content"]) == (SYSTEM, QUESTION)
    assert call["role"] == "assistant" and call["content"] == ""
    assert call["tool_calls"] == [
        {
            "id": "call_add_1",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 17, "b": 25}'},
        }
    ]
    assert tool_result == {"role": "tool", "tool_call_id": "call_add_1", "content": "42.0"}
    assert final == {"role": "assistant", "content": "The sum is 42."}
    metrics = result.sample.metrics
    assert (metrics["tool_calls"], metrics["tool_results"], metrics["model_calls"]) == (1, 1, 2)
    assert (metrics["prompt_tokens"], metrics["completion_tokens"]) == (40, 14)
    assert result.usage is not None and result.usage.total_tokens == 54
    assert all(request.body["stream"] for request in stub_model.requests)
    # Strands sends the tool-call turn back without content; the endpoint got "".
    sent = stub_model.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[2]["content"] == "" and sent[2]["tool_calls"][0]["id"] == "call_add_1"


def test_conversion_of_strands_own_messages() -> None:
    messages: Messages = [
        {"role": "user", "content": [{"text": "What is 17 + 25?"}]},
        {
            "role": "assistant",
            "content": [
                {"toolUse": {"toolUseId": "tu_1", "name": "add", "input": {"a": 17, "b": 25}}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "tu_1",
                        "status": "success",
                        "content": [{"text": "42"}],
                    }
                }
            ],
        },
        {"role": "assistant", "content": [{"text": "The sum is"}, {"text": "42."}]},
    ]
    converted = chat_messages(messages, "Be brief.")
    assert converted == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 17 + 25?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "tu_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 17, "b": 25}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "tu_1", "content": "42"},
        {"role": "assistant", "content": "The sum is\n42."},
    ]


def test_agent_registers_itself_and_splits_the_chat_prompt() -> None:
    system, messages = strands_prompt(
        [
            {"role": "system", "content": "A."},
            {"role": "system", "content": "B."},
            {"role": "user", "content": "hi"},
        ]
    )
    assert system == "A.\n\nB."
    assert messages == [{"role": "user", "content": [{"text": "hi"}]}]
    rollout = RolloutContext("r1", llm=LLMEndpoint("http://127.0.0.1:9/v1", "m"))
    token = _current.set(rollout)
    try:
        agent = RolloutAgent([{"role": "user", "content": "hi"}], system_prompt="Own.")
        with pytest.raises(RuntimeError, match="already registered"):
            RolloutAgent([])
    finally:
        _current.reset(token)
    assert rollout.sample_source is agent
    assert agent.system_prompt == "Own."
    sample = agent.get_sample()
    assert sample.messages == [
        {"role": "system", "content": "Own."},
        {"role": "user", "content": "hi"},
    ]
    assert sample.metrics["model_calls"] == 0


def test_a_mock_model_answers_the_streamed_agent_loop_through_the_runs_client() -> None:
    """Strands streams every call; ``MockModel`` answers with server-sent events through the
    run's model clients, with no socket."""
    from osmo_run.testing import MockModel, MockToolCall, run_workflow_sync

    model = MockModel([MockToolCall("add", {"a": 17, "b": 25}), "The sum is 42."])
    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    result = run_workflow_sync(AddStrandsWorkflow, prompt, model=model)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    tool_result, final = result.sample.messages[-2:]
    assert tool_result["role"] == "tool" and tool_result["content"] == "42.0"
    assert final == {"role": "assistant", "content": "The sum is 42."}
    assert model.call_count == 2 and all(call.stream for call in model.calls)
    assert result.sample.metrics["tool_calls"] == 1


def test_token_capture_puts_each_streamed_calls_ids_together_in_order(
    stub_model: StubModel,
) -> None:
    """``llm.capture: tokens`` with Strands, which streams every call: the ids and logprobs
    vLLM spreads over a stream's chunks are put back together, exactly, call by call."""
    import dataclasses

    stub_model.token_ids = True
    result = _run(dataclasses.replace(stub_model.endpoint, capture_tokens=True))
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert all(r.body["stream"] and r.body["return_token_ids"] for r in stub_model.requests)
    assert result.turns is not None and len(result.turns) == 2
    captured = [
        {k: turn[k] for k in ("prompt_token_ids", "completion_token_ids", "logprobs")}
        for turn in result.turns
    ]
    assert captured == stub_model.token_answers
    assert [t["finish_reason"] for t in result.turns] == ["tool_calls", "stop"]
    assert [m["role"] for m in result.turns[1]["messages"]] == [
        "system", "user", "assistant", "tool",
    ]  # fmt: skip
