"""The OpenAI Agents SDK integration: the SDK's real agent loop, its conversation as the
rollout's sample, and its usage in the rollout's accounting.

Against the embedded model the loop runs for real but SmolLM2 never calls a tool; the
tool-call path runs the same real loop against a scripted endpoint, and the conversion is
also fed the SDK's own item objects.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.llm.conftest import require_extra
from tests.llm.stub_model import StubModel

require_extra("agents", "openai-agents")

from agents import Agent, ModelSettings, Runner, function_tool  # noqa: E402
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from osmo_run import AgentWorkflow, AgentWorkflowConfig, AgentWorkflowContext  # noqa: E402
from osmo_run.integrations.openai_agents import (  # noqa: E402
    RolloutSession,
    chat_messages,
    rollout_model,
)
from osmo_run.sdk.context import LLMEndpoint, RolloutContext, _current  # noqa: E402
from osmo_run.sdk.rollout import run_workflow_phase  # noqa: E402
from osmo_run.sdk.types import ExecutionRequest, ExecutionResult, RolloutStatus  # noqa: E402

QUESTION = "What is 17 + 25? Use the add tool."


@function_tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


class AddAgentWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> None:
        agent = Agent(
            name="assistant",
            instructions="Call the add tool to add numbers, then give the result.",
            tools=[add],
            model=rollout_model(),
            model_settings=ModelSettings(temperature=0.0, max_tokens=48),
        )
        await Runner.run(agent, ctx.prompt, session=RolloutSession(), max_turns=4)


def _run(llm: LLMEndpoint) -> ExecutionResult:
    request = ExecutionRequest("agents-1", [{"role": "user", "content": QUESTION}])
    config = AgentWorkflowConfig()
    return asyncio.run(run_workflow_phase(request, AddAgentWorkflow, config, llm))


def _paired_tool_calls(messages: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    calls = [
        call["id"]
        for message in messages
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or []
    ]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    return calls, results


@pytest.mark.slow
def test_real_agent_loop_against_the_embedded_model(embedded_llm: LLMEndpoint) -> None:
    result = _run(embedded_llm)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    messages = result.sample.messages
    json.dumps(messages)  # the output file can hold it
    assert messages[0] == {"role": "user", "content": QUESTION}
    final = messages[-1]
    assert final["role"] == "assistant"
    assert isinstance(final["content"], str) and final["content"].strip()
    calls, results = _paired_tool_calls(messages)
    assert calls == results  # whatever tools were called got their results
    metrics = result.sample.metrics
    assert metrics["model_calls"] >= 1 and metrics["tool_calls"] == len(calls)
    assert metrics["prompt_tokens"] > 0 and metrics["completion_tokens"] > 0
    assert result.usage is not None
    assert (result.usage.model_calls, result.usage.total_tokens) == (
        metrics["model_calls"],
        metrics["total_tokens"],
    )
    assert result.usage.model_sec > 0


def test_tool_calls_and_results_become_the_sample(stub_model: StubModel) -> None:
    result = _run(stub_model.endpoint)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    user, call, tool, final = result.sample.messages
    assert user == {"role": "user", "content": QUESTION}
    assert call["role"] == "assistant" and call["content"] == ""
    assert call["tool_calls"] == [
        {
            "id": "call_add_1",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 17, "b": 25}'},
        }
    ]
    assert tool == {"role": "tool", "tool_call_id": "call_add_1", "content": "42.0"}
    assert final == {"role": "assistant", "content": "The sum is 42."}
    metrics = result.sample.metrics
    assert (metrics["tool_calls"], metrics["tool_results"], metrics["model_calls"]) == (1, 1, 2)
    assert (metrics["prompt_tokens"], metrics["completion_tokens"]) == (40, 14)
    assert result.usage is not None and result.usage.total_tokens == 54
    # The SDK sends the tool-call turn back with content null; the endpoint got "".
    sent = stub_model.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[2]["content"] == "" and sent[2]["tool_calls"][0]["id"] == "call_add_1"


def test_session_converts_the_sdks_own_items() -> None:
    agent = Agent(name="recorded")
    call = ResponseFunctionToolCall(
        type="function_call",
        call_id="call_1",
        name="add",
        arguments='{"a": 17, "b": 25}',
        id="fc_1",
        status="completed",
    )
    answer = ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text="The sum is 42.", annotations=[])],
    )
    output = {"type": "function_call_output", "call_id": "call_1", "output": "42"}
    items = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 17 + 25?"},
        ToolCallItem(agent=agent, raw_item=call).to_input_item(),
        ToolCallOutputItem(agent=agent, raw_item=output, output=42).to_input_item(),  # type: ignore[arg-type]
        MessageOutputItem(agent=agent, raw_item=answer).to_input_item(),
    ]
    rollout = RolloutContext("r1")
    rollout.record_llm_call(30, 9, 0.5)
    rollout.record_llm_call(45, 6, 0.25)
    token = _current.set(rollout)
    try:
        session = RolloutSession()
        asyncio.run(session.add_items(items))
    finally:
        _current.reset(token)
    assert rollout.sample_source is session
    sample = session.get_sample()
    assert sample.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 17 + 25?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 17, "b": 25}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "assistant", "content": "The sum is 42."},
    ]
    assert sample.metrics == {
        "model_calls": 2,
        "prompt_tokens": 75,
        "completion_tokens": 15,
        "total_tokens": 90,
        "tool_calls": 1,
        "tool_results": 1,
    }
    assert chat_messages([]) == []
    assert asyncio.run(session.get_items(limit=1)) == [items[-1]]
    assert asyncio.run(session.pop_item()) == items[-1]


def test_outside_a_rollout_or_without_an_endpoint_is_one_clear_error() -> None:
    with pytest.raises(RuntimeError, match="no rollout is running"):
        rollout_model()
    token = _current.set(RolloutContext("r1"))
    try:
        with pytest.raises(ValueError, match="no model endpoint"):
            rollout_model()
    finally:
        _current.reset(token)


def test_a_mock_model_answers_the_agent_loop_through_the_runs_client() -> None:
    """The SDK's own ``AsyncOpenAI`` client, the run's per-call retries under it, and no
    socket: ``MockModel`` answers through the run's model clients."""
    from osmo_run.testing import MockError, MockModel, MockToolCall, run_workflow_sync

    model = MockModel(
        [
            MockError(429, retry_after=0),
            MockToolCall("add", {"a": 17, "b": 25}, id="call_add_1"),
            "The sum is 42.",
        ]
    )
    result = run_workflow_sync(AddAgentWorkflow, QUESTION, model=model)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    assert [m["role"] for m in result.sample.messages] == ["user", "assistant", "tool", "assistant"]
    assert result.sample.messages[2]["content"] == "42.0"
    assert [call.status for call in model.calls] == [429, 200, 200]
    assert model.calls[1].tools[0]["function"]["name"] == "add"
    assert result.usage is not None and result.usage.retried_calls == 1


def test_a_dropped_connection_under_the_sdks_client_is_retried_by_the_run() -> None:
    """A ``ModelTransport``'s ``TransportError`` reaches the SDK's client as a connection
    error, which the run's per-call retries try again."""
    from osmo_run.sdk.model_http import HTTPAnswer, TransportError
    from osmo_run.testing import MockModel, MockToolCall, run_workflow_sync

    model = MockModel([MockToolCall("add", {"a": 17, "b": 25}), "The sum is 42."])
    drops: list[str] = []

    class DropsFirst:
        async def post(
            self, url: str, body: bytes, headers: dict[str, str], timeout_sec: float
        ) -> HTTPAnswer:
            if not drops:
                drops.append(url)
                raise TransportError(f"cannot reach {url}: connection dropped", retryable=True)
            return await model.post(url, body, headers, timeout_sec)

    result = run_workflow_sync(AddAgentWorkflow, QUESTION, model=DropsFirst(), llm=model.endpoint)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert len(drops) == 1 and model.call_count == 2
    assert result.usage is not None and result.usage.retried_calls == 1


def test_a_spent_budget_stops_the_agents_next_call_as_budget_exceeded(
    stub_model: StubModel,
) -> None:
    """The integration's transport asks the run's budget before each call: the agent's
    first call (27 tokens) spends a budget of 20, its second is never sent, and the row
    ends as ``budget_exceeded`` although openai wraps the refusal in its own error."""
    from osmo_run.sdk.model_budget import RunBudget
    from osmo_run.sdk.model_layer import ModelLayer, reset_model_layer, use_model_layer
    from osmo_run.sdk.model_limits import ModelLimits

    layer = ModelLayer(ModelLimits(4), RunBudget(tokens=20))
    token = use_model_layer(layer)
    try:
        result = _run(stub_model.endpoint)
    finally:
        reset_model_layer(token)
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is not None
    assert result.error_category.value == "budget_exceeded", result.error_message
    assert len(stub_model.requests) == 1, "the second call was not sent"
    assert layer.budget is not None and layer.budget.spent_tokens == 27
    assert layer.budget.refused_calls == 1
    (limit,) = layer.limits.all()
    assert (limit.calls, limit.throttled, limit.in_flight) == (1, 0, 0), "one call was sent"


def test_token_capture_through_the_agent_loop_keeps_each_calls_ids_in_order(
    stub_model: StubModel,
) -> None:
    """``llm.capture: tokens``: the SDK's requests ask for vLLM's token ids and logprobs
    through the run's transport, and each of the loop's calls is a turn of the rollout
    with exactly the ids the endpoint sent, in call order."""
    import dataclasses

    stub_model.token_ids = True
    stub_model.tool_turns = 2
    result = _run(dataclasses.replace(stub_model.endpoint, capture_tokens=True))
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert all(r.body["return_token_ids"] and r.body["logprobs"] for r in stub_model.requests)
    assert result.turns is not None and len(result.turns) == 3
    captured = [
        {k: turn[k] for k in ("prompt_token_ids", "completion_token_ids", "logprobs")}
        for turn in result.turns
    ]
    assert captured == stub_model.token_answers
    assert [t["finish_reason"] for t in result.turns] == ["tool_calls", "tool_calls", "stop"]
    assert result.turns[2]["messages"] == stub_model.requests[2].body["messages"]
    assert [m["role"] for m in result.turns[2]["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "tool",
    ]  # fmt: skip
