"""What both integrations share: the rollout's endpoint, an OpenAI client for it that never
sends an assistant message without content, chat-message normalization and sample metrics.

Imports ``openai`` (both frameworks depend on it) and its HTTP library only inside functions.
"""

from __future__ import annotations

import importlib
import json
from types import ModuleType
from typing import TYPE_CHECKING, Any

from osmo_run.sdk.context import LLMEndpoint, get_rollout_context
from osmo_run.sdk.types import LLMUsage, Message

if TYPE_CHECKING:
    from openai import AsyncOpenAI

PLACEHOLDER_API_KEY = "osmo-run-no-key"
"""Sent when the endpoint needs no key (the embedded model): the OpenAI client insists on one."""


def missing_extra(module: str, extra: str, exc: ImportError) -> ModuleNotFoundError:
    """The error an integration raises when its framework is not installed."""
    error = ModuleNotFoundError(
        f"osmo_run.integrations.{module} needs the '{extra}' extra: "
        f"pip install 'osmo-run[{extra}]' ({exc})",
        name=exc.name,
    )
    return error


def rollout_endpoint(llm: LLMEndpoint | None = None) -> LLMEndpoint:
    """``llm``, or the running rollout's endpoint; ``ValueError`` when there is none and
    ``RuntimeError`` outside a rollout."""
    if llm is not None:
        return llm
    endpoint = get_rollout_context().llm
    if endpoint is None:
        raise ValueError(
            "no model endpoint: add an 'llm' section to the run spec (base_url and model, "
            "or `llm: embedded`)"
        )
    return endpoint


def fill_assistant_content(messages: object) -> bool:
    """Give every assistant message that carries ``tool_calls`` but no content an empty
    string as content, in place; return whether anything changed.

    Agent frameworks send ``"content": null`` (or no content) next to tool calls, as the
    OpenAI API allows; some OpenAI-compatible servers answer that with HTTP 500.
    """
    changed = False
    for message in messages if isinstance(messages, list) else []:
        if (
            isinstance(message, dict)
            and message.get("role") == "assistant"
            and message.get("tool_calls")
            and message.get("content") is None
        ):
            message["content"] = ""
            changed = True
    return changed


def _http_module() -> ModuleType:
    """The HTTP library the installed ``openai`` is built on: ``httpx`` (openai 1 and 2) or
    its successor ``httpx2`` (openai 3), with the same API."""
    from openai import DefaultAsyncHttpxClient

    for cls in DefaultAsyncHttpxClient.__mro__:
        if cls.__name__ == "AsyncClient":
            return importlib.import_module(cls.__module__.partition(".")[0])
    return importlib.import_module("httpx")


def _fixing_transport(http: Any) -> Any:
    """An async transport of the ``http`` module that applies :func:`fill_assistant_content`
    to chat-completion requests."""

    class AssistantContentTransport(http.AsyncBaseTransport):
        def __init__(self) -> None:
            # No kept-alive connections: an unclosed client then holds no socket.
            self._inner = http.AsyncHTTPTransport(limits=http.Limits(max_keepalive_connections=0))

        async def handle_async_request(self, request: Any) -> Any:
            if request.method == "POST" and request.url.path.endswith("/chat/completions"):
                body = await request.aread()
                try:
                    data = json.loads(body)
                except ValueError:
                    data = None
                if isinstance(data, dict) and fill_assistant_content(data.get("messages")):
                    content = json.dumps(data).encode()
                    headers = request.headers.copy()
                    headers["content-length"] = str(len(content))
                    request = http.Request(
                        request.method,
                        request.url,
                        headers=headers,
                        content=content,
                        extensions=request.extensions,
                    )
            return await self._inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self._inner.aclose()

    return AssistantContentTransport()


def openai_client(endpoint: LLMEndpoint) -> AsyncOpenAI:
    """An ``AsyncOpenAI`` client for ``endpoint`` whose requests never carry an assistant
    tool-call message with null content (see :func:`fill_assistant_content`)."""
    from openai import AsyncOpenAI

    http = _http_module()
    return AsyncOpenAI(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key or PLACEHOLDER_API_KEY,
        http_client=http.AsyncClient(transport=_fixing_transport(http), timeout=600.0),
    )


def text_content(content: object) -> object:
    """A list of text parts as one string (how graders read content); anything else as is."""
    if isinstance(content, list) and content:
        texts = [
            part.get("text")
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text")
        ]
        if len(texts) == len(content) and all(isinstance(t, str) for t in texts):
            return "\n".join(str(t) for t in texts)
    return content


def normalize_messages(messages: list[dict[str, Any]]) -> list[Message]:
    """Chat messages as plain dicts, text parts joined, and no assistant tool-call message
    without content."""
    out: list[Message] = []
    for message in messages:
        item = dict(message)
        if "content" in item:
            item["content"] = text_content(item["content"])
        out.append(item)
    fill_assistant_content(out)
    return out


def conversation_metrics(messages: list[Message], usage: LLMUsage) -> dict[str, float]:
    """The sample's metrics: the rollout's model usage and the tool calls it made."""
    tool_calls = sum(
        len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant"
    )
    return {
        "model_calls": usage.model_calls,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "tool_calls": tool_calls,
        "tool_results": sum(1 for m in messages if m.get("role") == "tool"),
    }
