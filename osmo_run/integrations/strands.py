"""Strands Agents in a rollout (``pip install 'osmo-run[strands]'``).

Inside ``AgentWorkflow.run``::

    from osmo_run.integrations.strands import RolloutAgent

    agent = RolloutAgent(ctx.prompt, tools=[...])  # a strands Agent
    await agent.invoke_async()
    return None  # the agent is the rollout's sample

- :func:`rollout_model` is Strands' ``OpenAIModel`` bound to the rollout's endpoint
  (``ctx.llm``): every call's usage and latency is counted in the rollout (the output row's
  ``usage``), and no assistant tool-call message is sent without content.
- :class:`RolloutAgent` is a ``strands.Agent`` that uses :func:`rollout_model` unless given
  a model (and then leaves retries to it: no ``retry_strategy`` unless given one), takes
  the row's chat prompt (system messages become its system prompt; chat messages given as
  ``messages=`` are converted the same way, as osmosis-ai does), prints
  nothing unless given a ``callback_handler``, and registers itself as the rollout's
  :class:`~osmo_run.sdk.context.SampleSource`: its conversation (messages, tool calls, tool
  results) becomes the sample, as chat messages, with the model usage and tool-call counts
  in its metrics.
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncGenerator
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
    from strands import Agent
    from strands.models.openai import OpenAIModel
    from strands.types.content import Messages
    from strands.types.streaming import StreamEvent
except ImportError as exc:
    raise missing_extra("strands", "strands", exc) from exc

__all__ = ["RolloutAgent", "RolloutOpenAIModel", "chat_messages", "rollout_model", "strands_prompt"]


class RolloutOpenAIModel(OpenAIModel):
    """Strands' ``OpenAIModel`` that counts each call's usage and latency in the running
    rollout."""

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[StreamEvent, None]:
        started = time.monotonic()
        usage: dict[str, Any] | None = None
        finished = False
        try:
            async for event in super().stream(*args, **kwargs):
                metadata = event.get("metadata")
                if metadata is not None:
                    usage = dict(metadata.get("usage") or {})
                yield event
            finished = True
        finally:
            if finished or usage is not None:
                usage = usage or {}
                record_usage(
                    {
                        "prompt_tokens": usage.get("inputTokens"),
                        "completion_tokens": usage.get("outputTokens"),
                    },
                    time.monotonic() - started,
                )


def rollout_model(
    llm: LLMEndpoint | None = None, params: dict[str, Any] | None = None
) -> RolloutOpenAIModel:
    """A model for ``Agent(model=...)`` talking to ``llm`` (default: the rollout's
    endpoint); ``params`` are chat-completion parameters (``temperature``, ``max_tokens``).

    Raises ``ValueError`` when the run spec has no ``llm`` section, ``RuntimeError`` outside
    a rollout.
    """
    endpoint = rollout_endpoint(llm)
    return RolloutOpenAIModel(
        client=openai_client(endpoint), model_id=endpoint.model, params=params or {}
    )


def _blocks(content: object) -> Any:
    """Message content as Strands content blocks: a string becomes one text block; a list
    (blocks already) is kept."""
    if isinstance(content, list):
        return content
    return [{"text": "" if content is None else str(content)}]


def strands_prompt(prompt: list[Message]) -> tuple[str | None, Messages]:
    """A chat prompt (``ctx.prompt``) as Strands' ``(system_prompt, messages)``: system
    messages joined into the system prompt, the others with their content as content
    blocks (a string becomes a text block; blocks are kept)."""
    system = [str(m.get("content") or "") for m in prompt if m.get("role") == "system"]
    messages: Messages = [
        {"role": m["role"], "content": _blocks(m.get("content"))}
        for m in prompt
        if m.get("role") in ("user", "assistant")
    ]
    return ("\n\n".join(system) if system else None), messages


def _chat_style(messages: list[Any]) -> bool:
    """Whether ``messages`` are chat messages (string content, system messages) rather than
    Strands messages (content blocks only)."""
    return any(
        isinstance(m, dict) and (isinstance(m.get("content"), str) or m.get("role") == "system")
        for m in messages
    )


def chat_messages(messages: Messages, system_prompt: str | None = None) -> list[Message]:
    """A Strands conversation as chat messages, converted the way Strands' ``OpenAIModel``
    converts it for the endpoint: assistant ``tool_calls``, ``tool`` results with their
    ``tool_call_id``, text parts joined into strings.

    A message the converter refuses (a video block, say) is kept with its Strands content,
    as ``{"role": ..., "content": "", "strands_content": [...]}``, never failing the
    rollout; the messages around it are converted as usual.
    """
    try:
        formatted = OpenAIModel.format_request_messages(messages, system_prompt)
    except Exception:  # TypeError for content types the chat format has no place for
        formatted = _piecewise(messages, system_prompt)
    return normalize_messages([dict(message) for message in formatted])


def _piecewise(messages: Messages, system_prompt: str | None) -> list[dict[str, Any]]:
    """Each message converted alone, one the converter refuses kept with its Strands
    content (and the system prompt as a system message when the converter refuses even
    that). Never raises for what the converter does or for a message without content."""
    try:
        out = [dict(m) for m in OpenAIModel.format_request_messages([], system_prompt)]
    except Exception:
        out = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
    for message in messages:
        try:
            out.extend(dict(m) for m in OpenAIModel.format_request_messages([message], None))
        except Exception:
            out.append(_kept_whole(message))
    return out


def _kept_whole(message: Any) -> dict[str, Any]:
    """``message`` as a chat message that carries its Strands content (``strands_content``)."""
    is_dict = isinstance(message, dict)
    role = message.get("role") if is_dict else None
    content = message.get("content") if is_dict else None
    kept = copy.deepcopy(list(content)) if isinstance(content, list) else []
    return {
        "role": role if isinstance(role, str) else "assistant",
        "content": "",
        "strands_content": kept,
    }


def unconverted_messages(messages: list[Message]) -> int:
    """How many messages :func:`chat_messages` kept with their Strands content."""
    return sum(1 for m in messages if "strands_content" in m)


class RolloutAgent(Agent):
    """A ``strands.Agent`` that talks to the rollout's endpoint and is its sample (see the
    module docstring). ``prompt`` is the row's chat prompt; every other argument is
    ``strands.Agent``'s. Create it inside ``run()``: it registers itself with the running
    rollout, which takes exactly one sample source."""

    def __init__(
        self,
        prompt: list[Message] | None = None,
        *,
        model: Any = None,
        messages: Messages | None = None,
        system_prompt: str | None = None,
        callback_handler: Any = None,
        **kwargs: Any,
    ) -> None:
        rollout = get_rollout_context()
        if messages is not None and _chat_style(messages):  # as osmosis-ai's agent takes them
            message_system, messages = strands_prompt(list(messages))  # type: ignore[arg-type]
            system_prompt = system_prompt if system_prompt is not None else message_system
        if prompt is not None:
            prompt_system, prompt_messages = strands_prompt(prompt)
            system_prompt = system_prompt if system_prompt is not None else prompt_system
            messages = messages if messages is not None else prompt_messages
        if model is None:
            # The rollout's model retries each call within the rollout's deadline already;
            # Strands' own retries (4 s, 8 s... on throttling) would wait past it.
            kwargs.setdefault("retry_strategy", None)
        super().__init__(
            model=model if model is not None else rollout_model(),
            messages=messages,
            system_prompt=system_prompt,
            callback_handler=callback_handler,
            **kwargs,
        )
        self._osmo_rollout: RolloutContext = rollout
        rollout.register_sample_source(self)

    def get_sample(self) -> RolloutSample:
        """The conversation as chat messages, with usage and tool counts as metrics;
        messages the chat format cannot hold are kept and named in the row's warnings."""
        messages = chat_messages(self.messages, self.system_prompt)
        kept = unconverted_messages(messages)
        if kept:
            self._osmo_rollout.warn(
                f"{kept} Strands message(s) have content chat messages cannot hold; kept in "
                "the sample with their Strands content under 'strands_content'"
            )
        return RolloutSample(messages, conversation_metrics(messages, self._osmo_rollout.usage))
