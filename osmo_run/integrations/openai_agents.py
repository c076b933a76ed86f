"""The OpenAI Agents SDK in a rollout (``pip install 'osmo-run[openai-agents]'``).

Inside ``AgentWorkflow.run``::

    from agents import Agent, Runner
    from osmo_run.integrations.openai_agents import RolloutSession, rollout_model

    agent = Agent(name="helper", instructions="...", tools=[...], model=rollout_model())
    await Runner.run(agent, ctx.prompt, session=RolloutSession())
    return None  # the session is the rollout's sample

- :func:`rollout_model` is a chat-completions model bound to the rollout's endpoint
  (``ctx.llm``): every call's usage and latency is counted in the rollout (the output row's
  ``usage``), and no assistant tool-call message is sent with null content.
- :class:`RolloutSession` is an in-memory agents ``Session`` that registers itself as the
  rollout's :class:`~osmo_run.sdk.context.SampleSource`: the conversation the runner
  persisted (messages, tool calls, tool results) becomes the sample, as chat messages, with
  the model usage and tool-call counts in its metrics.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from osmo_run.integrations._common import (
    conversation_metrics,
    missing_extra,
    normalize_messages,
    openai_client,
    rollout_endpoint,
)
from osmo_run.sdk.context import LLMEndpoint, RolloutContext, get_rollout_context
from osmo_run.sdk.llm import record_usage
from osmo_run.sdk.types import Message, RolloutSample

try:
    from agents import OpenAIChatCompletionsModel, set_tracing_disabled
    from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
    from agents.memory import SessionABC
    from agents.models.chatcmpl_converter import Converter
except ImportError as exc:
    raise missing_extra("openai_agents", "openai-agents", exc) from exc

__all__ = ["RolloutChatModel", "RolloutSession", "chat_messages", "rollout_model"]


class RolloutChatModel(OpenAIChatCompletionsModel):
    """``OpenAIChatCompletionsModel`` that counts each call's usage and latency in the
    running rollout."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        started = time.monotonic()
        response = await super().get_response(*args, **kwargs)
        record_usage(response.usage, time.monotonic() - started, str(self.model))
        return response

    async def stream_response(
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[TResponseStreamEvent]:
        started = time.monotonic()
        async for event in super().stream_response(*args, **kwargs):
            if event.type == "response.completed":
                record_usage(event.response.usage, time.monotonic() - started)
            yield event


def rollout_model(llm: LLMEndpoint | None = None) -> RolloutChatModel:
    """A model for ``Agent(model=...)`` talking to ``llm`` (default: the rollout's endpoint).

    Raises ``ValueError`` when the run spec has no ``llm`` section, ``RuntimeError`` outside
    a rollout. Turns the SDK's tracing off unless ``OPENAI_API_KEY`` is set (traces go to
    OpenAI, which needs that key).
    """
    endpoint = rollout_endpoint(llm)
    if not os.environ.get("OPENAI_API_KEY"):
        set_tracing_disabled(True)
    return RolloutChatModel(model=endpoint.model, openai_client=openai_client(endpoint))


def chat_messages(items: list[TResponseInputItem]) -> list[Message]:
    """Agents SDK items (Responses API shapes) as chat messages, converted the way the SDK
    converts them for a chat-completions model: assistant ``tool_calls`` and ``tool``
    results with their ``tool_call_id``; text parts joined into strings.

    An item chat messages cannot express (a hosted tool call, an ``item_reference``, a
    compaction item: the SDK's converter refuses them) is kept whole, as
    ``{"role": ..., "content": "", "agents_item": item}``, never failing the rollout: the
    conversation around it is converted as usual (see :func:`unconverted_items`).
    """
    try:
        converted = Converter.items_to_messages(copy.deepcopy(items))
    except Exception:  # the converter raises UserError, or worse, for what it cannot map
        return normalize_messages(_piecewise(items))
    return normalize_messages([dict(message) for message in converted])


def _converts(item: TResponseInputItem) -> bool:
    try:
        Converter.items_to_messages([copy.deepcopy(item)])
    except Exception:
        return False
    return True


def _piecewise(items: list[TResponseInputItem]) -> list[dict[str, Any]]:
    """Runs of convertible items converted together (tool calls stay in one assistant
    message), each item the converter refuses kept as it is between them; a run the
    converter refuses as a whole (items it takes one by one) has each item kept. Never
    raises for what the converter does."""
    out: list[dict[str, Any]] = []
    run: list[TResponseInputItem] = []
    for item in items:
        if _converts(item):
            run.append(item)
            continue
        out.extend(_converted_run(run))
        run = []
        out.append(_kept_whole(item))
    out.extend(_converted_run(run))
    return out


def _converted_run(run: list[TResponseInputItem]) -> list[dict[str, Any]]:
    if not run:
        return []
    try:
        return [dict(m) for m in Converter.items_to_messages(copy.deepcopy(run))]
    except Exception:  # convertible one by one, not together: keep each
        return [_kept_whole(item) for item in run]


def _kept_whole(item: TResponseInputItem) -> dict[str, Any]:
    """``item`` as a chat message that carries it whole (``agents_item``)."""
    role = item.get("role") if isinstance(item, dict) else None
    return {
        "role": role if isinstance(role, str) else "assistant",
        "content": "",
        "agents_item": copy.deepcopy(item),
    }


def unconverted_items(messages: list[Message]) -> list[str]:
    """The types of the items :func:`chat_messages` kept whole, in order."""
    return [
        str((m["agents_item"] or {}).get("type", "?"))
        for m in messages
        if isinstance(m.get("agents_item"), dict)
    ]


class RolloutSession(SessionABC):
    """An in-memory session that is the rollout's sample source (see the module docstring).

    Create it inside ``run()`` (it registers itself with the running rollout, which takes
    exactly one sample source) and pass it to every ``Runner.run`` of the rollout.
    """

    def __init__(self, session_id: str | None = None) -> None:
        self._rollout: RolloutContext = get_rollout_context()
        self.session_id = session_id or self._rollout.rollout_id
        self.session_settings = None
        self._items: list[TResponseInputItem] = []
        self._rollout.register_sample_source(self)

    @property
    def items(self) -> list[TResponseInputItem]:
        """The persisted items, oldest first."""
        return list(self._items)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        items = self._items if limit is None else self._items[-limit:] if limit > 0 else []
        return copy.deepcopy(items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self._items.extend(copy.deepcopy(items))

    async def pop_item(self) -> TResponseInputItem | None:
        return self._items.pop() if self._items else None

    async def clear_session(self) -> None:
        self._items.clear()

    def get_sample(self) -> RolloutSample:
        """The conversation as chat messages, with usage and tool counts as metrics; items
        that chat messages cannot express are kept whole and named in the row's warnings."""
        messages = chat_messages(self._items)
        kept = unconverted_items(messages)
        if kept:
            self._rollout.warn(
                f"{len(kept)} agents item(s) have no chat-message form ({', '.join(kept)}); "
                "kept whole in the sample as messages with an 'agents_item'"
            )
        return RolloutSample(messages, conversation_metrics(messages, self._rollout.usage))
