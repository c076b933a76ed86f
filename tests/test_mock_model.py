"""``osmo_run.testing.MockModel`` and the sync helpers: scripted model answers served
through the run's own model clients (retries, usage, the integrations' client), no network.

The endpoint is ``http://mock-model.invalid/v1``: a call that left the process could not
resolve it, so every answer here came through the run's transport seam.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from osmo_run import (
    AgentWorkflow,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    ErrorCategory,
    Grader,
    GraderContext,
    RolloutStatus,
)
from osmo_run.sdk.llm import chat_completion
from osmo_run.sdk.model_http import HTTPAnswer, TransportError
from osmo_run.testing import (
    MockCall,
    MockError,
    MockModel,
    MockReply,
    MockToolCall,
    run_grader_sync,
    run_rollout_sync,
    run_workflow,
    run_workflow_sync,
)


class AskTwiceWorkflow(AgentWorkflow):
    """Asks the model, then asks again with its answer in the conversation."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        messages: list[dict[str, Any]] = list(ctx.prompt)
        for _ in range(2):
            answer = await chat_completion(messages)
            messages.append(answer["choices"][0]["message"])
        return AgentWorkflowOutput(messages)


class AskOnceWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        answer = await chat_completion(ctx.prompt, temperature=0.0)
        return AgentWorkflowOutput([*ctx.prompt, answer["choices"][0]["message"]])


class JudgeGrader(Grader):
    """Reward 1 when the judge answers ``yes``."""

    async def grade(self, ctx: GraderContext) -> float:
        assert ctx.sample is not None
        question = [{"role": "user", "content": f"Is {ctx.sample.messages[-1]['content']} right?"}]
        verdict = await chat_completion(question)
        return 1.0 if verdict["choices"][0]["message"]["content"] == "yes" else 0.0


def test_a_sequence_answers_the_calls_in_order_and_records_what_was_sent() -> None:
    model = MockModel(["Four.", MockToolCall("add", {"a": 2, "b": 2}, id="call_x")])
    result = run_workflow_sync(AskTwiceWorkflow, "What is 2+2?", model=model)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    assert result.sample.messages[1] == {"role": "assistant", "content": "Four."}
    assert result.sample.messages[2]["tool_calls"] == [
        {
            "id": "call_x",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'},
        }
    ]
    assert model.call_count == 2
    first, second = model.calls
    assert first.url == "http://mock-model.invalid/v1/chat/completions"
    assert first.model == "mock-model" and first.prompt == "What is 2+2?"
    assert [m["role"] for m in second.messages] == ["user", "assistant"]
    # usage is counted as a run counts it: one call each, tokens from the answers
    assert result.usage is not None and result.usage.model_calls == 2
    assert result.usage.prompt_tokens == 3 + 4 and result.usage.completion_tokens == 1 + 1


def test_a_mapping_answers_each_prompt_its_own_sequence_in_a_graded_rollout() -> None:
    model = MockModel({"What is 2+2?": "4", "Is 4 right?": MockReply("yes", prompt_tokens=9)})
    result = run_rollout_sync(
        AskOnceWorkflow, "What is 2+2?", label="4", grader=JudgeGrader, model=model
    )
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == 1.0
    assert [call.prompt for call in model.calls] == ["What is 2+2?", "Is 4 right?"]
    assert model.calls[0].body["temperature"] == 0.0
    assert result.grader_usage is not None and result.grader_usage.prompt_tokens == 9


def test_run_grader_answers_the_judge_from_the_model() -> None:
    messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}]
    result = run_grader_sync(JudgeGrader, messages, "4", model=MockModel(["no"]))
    assert (result.status, result.reward) == (RolloutStatus.SUCCESS, 0.0)


def test_a_function_answers_from_the_call() -> None:
    def answer(call: MockCall) -> str:
        return call.prompt.upper()

    result = run_workflow_sync(AskOnceWorkflow, "shout", model=MockModel(answer))
    assert result.sample is not None
    assert result.sample.messages[-1]["content"] == "SHOUT"


def test_a_rate_limited_call_is_retried_after_its_retry_after_and_counted() -> None:
    model = MockModel([MockError(429, retry_after=0), MockError(503, retry_after=0), "ok"])
    result = run_workflow_sync(AskOnceWorkflow, "hi", model=model)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert [call.status for call in model.calls] == [429, 503, 200]
    assert result.usage is not None
    assert (result.usage.retried_calls, result.usage.model_calls) == (1, 1)


def test_a_retry_after_longer_than_a_call_waits_fails_the_row_as_rate_limited() -> None:
    model = MockModel([MockError(429, retry_after=3600, message="quota")])
    result = run_workflow_sync(AskOnceWorkflow, "hi", model=model)
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.RATE_LIMIT
    assert result.error_message is not None
    assert "Retry-After 3600s" in result.error_message and "quota" in result.error_message
    assert model.call_count == 1


def test_a_call_the_script_has_no_answer_for_fails_the_row_naming_it() -> None:
    model = MockModel({"expected": "fine"})
    result = run_workflow_sync(AskOnceWorkflow, "unexpected", model=model)
    assert result.error_category is ErrorCategory.MODEL_API_ERROR
    assert result.error_message is not None
    assert "no answer scripted for call 1 for prompt 'unexpected'" in result.error_message


def test_the_api_key_is_sent_but_never_recorded() -> None:
    from osmo_run.sdk.context import LLMEndpoint

    model = MockModel(["ok"])
    llm = LLMEndpoint(model.endpoint.base_url, "m", api_key="sk-secret-value")
    result = run_workflow_sync(AskOnceWorkflow, "hi", model=model, llm=llm)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    headers = {name.lower(): value for name, value in model.calls[0].headers.items()}
    assert headers["authorization"] == "<hidden>"
    assert "sk-secret-value" not in repr(model.calls)


def test_a_stream_request_is_answered_as_server_sent_events() -> None:
    async def main() -> bytes:
        model = MockModel([MockToolCall("add", '{"a": 1}')])
        body = b'{"model": "m", "messages": [], "stream": true}'
        answer = await model.post(model.endpoint.chat_completions_url, body, {}, 5.0)
        assert answer.headers.get("content-type") == "text/event-stream"
        return answer.body

    events = asyncio.run(main()).decode().split("\n\n")
    assert events[0].startswith("data: ") and '"tool_calls"' in events[0]
    assert events[-2] == "data: [DONE]"


def test_the_sync_helpers_refuse_a_running_loop_with_one_clear_error() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"`await run_workflow\(\.\.\.\)` instead"):
            run_workflow_sync(AskOnceWorkflow, "hi")
        # the async helper on the same loop works
        result = await run_workflow(AskOnceWorkflow, "hi", model=MockModel(["ok"]))
        assert result.status is RolloutStatus.SUCCESS

    asyncio.run(main())


def test_a_reply_may_hold_text_and_several_tool_calls() -> None:
    reply = MockReply(
        "Adding twice.",
        [MockToolCall("add", {"a": 1}), MockToolCall("add", '{"a": ')],
        completion_tokens=11,
    )
    result = run_workflow_sync(AskOnceWorkflow, "hi", model=MockModel([reply]))
    assert result.sample is not None
    message = result.sample.messages[-1]
    assert message["content"] == "Adding twice."
    assert [call["id"] for call in message["tool_calls"]] == ["call_1_0", "call_1_1"]
    assert message["tool_calls"][1]["function"]["arguments"] == '{"a": '  # as scripted
    assert result.usage is not None and result.usage.completion_tokens == 11


class DropsFirst:
    """A ``ModelTransport`` of a test's own: the first call's connection drops, the rest
    go to ``model``."""

    def __init__(self, model: MockModel) -> None:
        self.model = model
        self.dropped = 0

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timeout_sec: float
    ) -> HTTPAnswer:
        if not self.dropped:
            self.dropped += 1
            raise TransportError(f"cannot reach {url}: connection dropped", retryable=True)
        return await self.model.post(url, body, headers, timeout_sec)


def test_any_model_transport_stands_in_for_the_network_dropped_connections_included() -> None:
    model = MockModel(["after the drop"])
    transport = DropsFirst(model)
    result = run_workflow_sync(AskOnceWorkflow, "hi", model=transport, llm=model.endpoint)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    assert result.sample.messages[-1]["content"] == "after the drop"
    assert (transport.dropped, model.call_count) == (1, 1)
    assert result.usage is not None and result.usage.retried_calls == 1
