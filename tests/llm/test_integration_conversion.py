"""What osmosis-ai's own integration tests expect of its OpenAI Agents and Strands adapters,
held against osmo-run's: a conversation the chat format cannot fully express never costs a
successful rollout its sample, and a Strands agent takes chat-style messages.

The conversions are the frameworks' own (the agents SDK's ``Converter``, Strands'
``OpenAIModel``), fed the frameworks' own item and message shapes; no model is called.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest

from osmo_run.sdk.context import LLMEndpoint, RolloutContext, _current

HAS_AGENTS = importlib.util.find_spec("agents") is not None
HAS_STRANDS = importlib.util.find_spec("strands") is not None

HOSTED_SEARCH: dict[str, Any] = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {"type": "search", "query": "osmo-run"},
}


def _in_rollout(make: Any) -> tuple[Any, RolloutContext]:
    rollout = RolloutContext("r1")
    token = _current.set(rollout)
    try:
        return make(), rollout
    finally:
        _current.reset(token)


@pytest.mark.skipif(not HAS_AGENTS, reason="needs pip install 'osmo-run[openai-agents]'")
def test_agents_items_without_a_chat_form_are_kept_whole_not_fatal() -> None:
    from osmo_run.integrations.openai_agents import RolloutSession

    items: list[Any] = [
        {"role": "user", "content": "Search for osmo-run."},
        HOSTED_SEARCH,
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "add", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call_output", "call_id": "c2", "output": "2"},
        {"type": "item_reference", "id": "msg_0"},
        {"role": "assistant", "content": "Found it."},
    ]
    session, rollout = _in_rollout(RolloutSession)
    asyncio.run(session.add_items(items))
    sample = session.get_sample()
    roles = [m["role"] for m in sample.messages]
    assert roles == ["user", "assistant", "assistant", "tool", "tool", "assistant", "assistant"]
    assert sample.messages[1] == {"role": "assistant", "content": "", "agents_item": HOSTED_SEARCH}
    assert [c["id"] for c in sample.messages[2]["tool_calls"]] == ["c1", "c2"]  # one turn
    assert sample.messages[5]["agents_item"] == {"type": "item_reference", "id": "msg_0"}
    assert sample.messages[6] == {"role": "assistant", "content": "Found it."}
    assert sample.metrics["tool_calls"] == 2 and sample.metrics["tool_results"] == 2
    assert rollout.warnings == [
        "2 agents item(s) have no chat-message form (web_search_call, item_reference); "
        "kept whole in the sample as messages with an 'agents_item'"
    ]


@pytest.mark.skipif(not HAS_STRANDS, reason="needs pip install 'osmo-run[strands]'")
def test_strands_content_without_a_chat_form_is_kept_not_fatal() -> None:
    from osmo_run.integrations.strands import chat_messages

    video = {"video": {"format": "mp4", "source": {"bytes": b"\x00"}}}
    messages: Any = [
        {"role": "user", "content": [{"text": "Describe this."}]},
        {"role": "user", "content": [video]},
        {"role": "assistant", "content": [{"text": "A short clip."}]},
    ]
    converted = chat_messages(messages, "Be brief.")
    assert converted == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Describe this."},
        {"role": "user", "content": "", "strands_content": [video]},
        {"role": "assistant", "content": "A short clip."},
    ]


@pytest.mark.skipif(not HAS_STRANDS, reason="needs pip install 'osmo-run[strands]'")
def test_a_strands_agent_takes_chat_style_messages_as_osmosis_ai_does() -> None:
    from osmo_run.integrations.strands import RolloutAgent, rollout_model

    endpoint = LLMEndpoint("http://127.0.0.1:9/v1", "never-called")  # the agent is not run

    chat = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"text": "Hello."}]},
    ]
    agent, rollout = _in_rollout(lambda: RolloutAgent(messages=chat, model=rollout_model(endpoint)))
    assert agent.system_prompt == "You are helpful."
    assert agent.messages == [
        {"role": "user", "content": [{"text": "Hi"}]},
        {"role": "assistant", "content": [{"text": "Hello."}]},
    ]
    assert rollout.sample_source is agent
    assert agent.get_sample().messages == [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
    ]


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise TypeError("this converter maps nothing")


@pytest.mark.skipif(not HAS_AGENTS, reason="needs pip install 'osmo-run[openai-agents]'")
def test_an_agents_converter_that_fails_on_everything_keeps_every_item_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from osmo_run.integrations import openai_agents
    from osmo_run.integrations.openai_agents import RolloutSession

    monkeypatch.setattr(openai_agents.Converter, "items_to_messages", _refuse)
    items: list[Any] = [{"role": "user", "content": "hi"}, HOSTED_SEARCH]
    session, _ = _in_rollout(RolloutSession)
    asyncio.run(session.add_items(items))
    sample = session.get_sample()
    assert [m.get("agents_item") for m in sample.messages] == items
    assert [m["role"] for m in sample.messages] == ["user", "assistant"]


@pytest.mark.skipif(not HAS_STRANDS, reason="needs pip install 'osmo-run[strands]'")
def test_a_strands_converter_that_fails_on_everything_keeps_every_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from osmo_run.integrations import strands
    from osmo_run.integrations.strands import chat_messages

    monkeypatch.setattr(strands.OpenAIModel, "format_request_messages", _refuse)
    messages: Any = [
        {"role": "user", "content": [{"text": "Describe this."}]},
        {"role": "assistant"},  # no content at all
    ]
    assert chat_messages(messages, "Be brief.") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "", "strands_content": [{"text": "Describe this."}]},
        {"role": "assistant", "content": "", "strands_content": []},
    ]
