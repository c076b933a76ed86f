"""What both integrations share: the rollout's endpoint, the run's OpenAI client for it (one
per run and endpoint, on openai's aiohttp transport) that never sends an assistant message
without content and retries rate-limited calls, chat-message normalization and sample
metrics.

Imports ``openai`` (both frameworks depend on it) and its HTTP library only inside functions.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from types import ModuleType
from typing import TYPE_CHECKING, Any

from osmo_run.errors import BudgetExceededError
from osmo_run.sdk.context import LLMEndpoint, _current, get_rollout_context
from osmo_run.sdk.model_budget import REFUSED_STATUS, refused_by_budget
from osmo_run.sdk.model_clients import ModelClients, current_model_clients, endpoint_key
from osmo_run.sdk.model_http import ModelTransport, TransportError
from osmo_run.sdk.model_layer import answered, model_call, note_no_token_ids
from osmo_run.sdk.model_retry import (
    DEFAULT_POLICY,
    CallRetries,
    CallRetryPolicy,
    is_retryable_status,
    retry_after_sec,
)
from osmo_run.sdk.turns import CAPTURE_FIELDS, missing_ids, turn_of
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


def _aiohttp_transport_class(http: ModuleType) -> Any | None:
    """``httpx_aiohttp``'s transport for ``http`` (what openai's ``DefaultAioHttpClient`` is
    built on: ``pip install 'openai[aiohttp]'``), or ``None`` when it is not installed."""
    name = "httpx_aiohttp" if http.__name__ == "httpx" else f"httpx_aiohttp.{http.__name__}"
    try:
        return importlib.import_module(name).AiohttpTransport
    except (ImportError, AttributeError):
        return None


def _fixing_transport(http: Any, inner: Any, retry: CallRetryPolicy, capture: bool) -> Any:
    """An async transport of the ``http`` module around ``inner`` that applies
    :func:`fill_assistant_content` to chat-completion requests and retries 429, 408, 5xx
    answers and failed connections per call (:mod:`osmo_run.sdk.model_retry`; the client
    itself is built with ``max_retries=0``). Each try waits for a slot under the run's
    limit for the endpoint and is admitted by its budget first
    (:func:`~osmo_run.sdk.model_layer.model_call`: a spent budget raises
    ``BudgetExceededError``, which openai wraps in ``APIConnectionError``). A call whose
    tries run out returns its last answer (openai raises ``RateLimitError``,
    ``InternalServerError``...) or raises its last connection error
    (``APIConnectionError``). With ``capture`` (``llm.capture: tokens``) a chat-completion
    request also asks for token ids and logprobs and its answer is recorded as the
    rollout's next turn (:mod:`osmo_run.sdk.turns`): a JSON answer once read, a streamed
    one once the client has read it to its end (:func:`_captured_stream`)."""

    class RolloutTransport(http.AsyncBaseTransport):
        async def handle_async_request(self, request: Any) -> Any:
            if request.method == "POST" and request.url.path.endswith("/chat/completions"):
                request = _fixed_request(http, request, capture)
            retries = CallRetries(retry)
            while True:
                try:  # under the run's limit for the endpoint and its budget
                    async with model_call(str(request.url), retries.tries == 1) as slot:
                        response = await inner.handle_async_request(request)
                        slot.done(answered(response.status_code, response.headers))
                except http.TransportError:
                    wait = retries.next_wait()
                    if wait is None:
                        raise
                else:
                    await _raise_if_refused_by_budget(response)
                    if not is_retryable_status(response.status_code):
                        if capture and _is_stream(request, response):
                            return _captured_stream(http, request, response)
                        return await _remembered(request, response, capture)
                    wait = retries.next_wait(retry_after_sec(response.headers))
                    if wait is None:
                        return response
                    await response.aclose()
                await asyncio.sleep(wait)

        async def aclose(self) -> None:
            await inner.aclose()

    return RolloutTransport()


async def _raise_if_refused_by_budget(response: Any) -> None:
    """Raise :class:`~osmo_run.errors.BudgetExceededError` when ``response`` is the run's
    model gateway refusing a Harbor trial's call (its budget is spent): the rollout ends
    as ``budget_exceeded`` and is never retried (openai wraps the error in
    ``APIConnectionError``, whose cause it stays)."""
    if response.status_code != REFUSED_STATUS:
        return
    body = await response.aread()
    refused = refused_by_budget(response.status_code, response.headers, body)
    if refused is not None:
        raise BudgetExceededError(refused)


async def _remembered(request: Any, response: Any, capture: bool = False) -> Any:
    """``response``, its chat completion remembered as the rollout's latest call (for a
    rollout that fails without a sample: :func:`~osmo_run.sdk.context.conversation_before_failure`).
    Only a whole JSON answer is read here (the client would read it next); a stream is left
    to the client, and nothing is parsed unless the rollout fails."""
    rollout = _current.get()
    if (
        rollout is None
        or response.status_code != 200
        or not request.url.path.endswith("/chat/completions")
        or "json" not in response.headers.get("content-type", "")
    ):
        return response
    await response.aread()
    rollout.record_call(request.content, response.content)
    if capture:
        _record_turn(rollout, str(request.url), request.content, response.content)
    return response


def _is_stream(request: Any, response: Any) -> bool:
    return (
        response.status_code == 200
        and request.url.path.endswith("/chat/completions")
        and "event-stream" in response.headers.get("content-type", "")
    )


def _captured_stream(http: Any, request: Any, response: Any) -> Any:
    """``response`` (a streamed chat completion) passing its bytes on to the client as
    they come and keeping a copy; once the client has read it or closed it, the chunks are
    put together (:func:`stream_answer`) and recorded as the rollout's next turn. A
    stream that never got to its finish reason records nothing."""
    rollout = _current.get()
    if rollout is None:
        return response
    url, sent = str(request.url), request.content
    inner = response.stream

    class CapturedStream(http.AsyncByteStream):
        def __init__(self) -> None:
            self.parts: list[bytes] = []
            self.recorded = False

        async def __aiter__(self) -> Any:
            async for chunk in inner:
                self.parts.append(chunk)
                yield chunk
            self.record()

        def record(self) -> None:
            """Record the turn once, when the stream got to its finish reason (openai's
            client stops reading at ``[DONE]`` and closes the stream)."""
            if self.recorded:
                return
            self.recorded = True
            answer = stream_answer(b"".join(self.parts))
            choice = answer["choices"][0] if answer is not None else {}
            if answer is not None and choice.get("finish_reason") is not None:
                _record_turn(rollout, url, sent, answer)

        async def aclose(self) -> None:
            self.record()
            await inner.aclose()

    return http.Response(
        response.status_code,
        headers=response.headers,
        stream=CapturedStream(),
        extensions=response.extensions,
        request=request,
    )


def stream_answer(events: bytes) -> dict[str, Any] | None:
    """A streamed chat completion (server-sent events) as the one JSON answer it adds up
    to, for :func:`~osmo_run.sdk.turns.turn_of`: ``model``, ``prompt_token_ids`` (vLLM
    sends it with the first chunk) and one choice whose ``token_ids`` and
    ``logprobs.content`` are every chunk's in order and whose ``finish_reason`` is the
    last given. ``None`` when no chunk can be read."""
    answer: dict[str, Any] = {}
    choice: dict[str, Any] = {}
    token_ids: list[Any] = []
    logprobs: list[Any] = []
    seen = got_ids = got_logprobs = False
    for line in events.splitlines():
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        try:
            chunk = json.loads(payload)
        except (ValueError, RecursionError):
            continue
        if not isinstance(chunk, dict):
            continue
        seen = True
        for key in ("model", "prompt_token_ids"):
            if chunk.get(key) is not None:
                answer[key] = chunk[key]
        choices = chunk.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(first, dict):
            continue
        if first.get("prompt_token_ids") is not None:
            choice["prompt_token_ids"] = first["prompt_token_ids"]
        if isinstance(first.get("token_ids"), list):
            token_ids += first["token_ids"]
            got_ids = True
        content = first.get("logprobs", {}) if isinstance(first.get("logprobs"), dict) else {}
        if isinstance(content.get("content"), list):
            logprobs += content["content"]
            got_logprobs = True
        if first.get("finish_reason") is not None:
            choice["finish_reason"] = first["finish_reason"]
    if not seen:
        return None
    if got_ids:
        choice["token_ids"] = token_ids
    if got_logprobs:
        choice["logprobs"] = {"content": logprobs}
    return {**answer, "choices": [choice]}


def _record_turn(rollout: Any, url: str, sent: bytes, answer: bytes | dict[str, Any]) -> None:
    """Record the turn of one answered chat completion (``sent`` its JSON body, ``answer``
    the JSON answer or a streamed one put together) on ``rollout``; an answer that is not
    a JSON object is left to the client to complain about."""
    try:
        request = json.loads(sent)
        data = json.loads(answer) if isinstance(answer, bytes) else answer
    except (ValueError, RecursionError):
        return
    if not isinstance(data, dict):
        return
    messages = request.get("messages") if isinstance(request, dict) else None
    turn = turn_of(messages, data)
    rollout.record_turn(turn)
    if missing := missing_ids(turn):
        note_no_token_ids(url, missing)


def _fixed_request(http: Any, request: Any, capture: bool = False) -> Any:
    """``request`` with :func:`fill_assistant_content` applied to its JSON body and, with
    ``capture``, :data:`~osmo_run.sdk.turns.CAPTURE_FIELDS` the body does not set (the
    same request when nothing needs it: without capture, most bodies carry no tool calls
    and are not parsed)."""
    body = request.content  # openai sends its JSON body as bytes, already read
    if not capture and b'"tool_calls"' not in body:
        return request
    try:
        data = json.loads(body)
    except ValueError:
        return request
    if not isinstance(data, dict):
        return request
    changed = fill_assistant_content(data.get("messages"))
    if capture:
        missing = {key: value for key, value in CAPTURE_FIELDS.items() if key not in data}
        data.update(missing)
        changed = changed or bool(missing)
    if not changed:
        return request
    content = json.dumps(data).encode()
    headers = request.headers.copy()
    headers["content-length"] = str(len(content))
    return http.Request(
        request.method,
        request.url,
        headers=headers,
        content=content,
        extensions=request.extensions,
    )


def _answering_transport(http: Any, transport: ModelTransport) -> Any:
    """An async transport of the ``http`` module whose requests ``transport`` answers
    (the run's :class:`~osmo_run.sdk.model_http.ModelTransport`: a test's scripted model),
    with no socket. Its :class:`~osmo_run.sdk.model_http.TransportError` is raised as the
    ``http`` module's ``ConnectError`` (openai's ``APIConnectionError``) or, for a call
    that ran out of its time, ``ReadTimeout``."""

    class AnsweringTransport(http.AsyncBaseTransport):
        async def handle_async_request(self, request: Any) -> Any:
            body = await request.aread()
            timeouts = request.extensions.get("timeout") or {}
            timeout_sec = timeouts.get("read") or 600.0
            try:
                answer = await transport.post(
                    str(request.url), body, dict(request.headers), timeout_sec
                )
            except TransportError as exc:
                error = http.ConnectError if exc.retryable else http.ReadTimeout
                raise error(str(exc), request=request) from None
            items = getattr(answer.headers, "items", None)
            headers = list(items()) if callable(items) else []
            return http.Response(
                answer.status, headers=headers, content=answer.body, request=request
            )

    return AnsweringTransport()


def _new_openai_client(endpoint: LLMEndpoint, clients: ModelClients | None) -> AsyncOpenAI:
    from openai import AsyncOpenAI, DefaultAioHttpClient, DefaultAsyncHttpxClient

    http = _http_module()
    retry = DEFAULT_POLICY if clients is None else clients.retry
    if clients is None:
        # One rollout's own client (no run pools them): no kept-alive connections, so a
        # client nobody closes holds no socket.
        inner = http.AsyncHTTPTransport(limits=http.Limits(max_keepalive_connections=0))
        client_class: Any = DefaultAsyncHttpxClient
        limits = http.Limits(max_keepalive_connections=0)
    else:
        n = clients.connections
        # idle connections kept a minute (httpx's default is 5 s): rows between calls
        # may think longer than that, and a new TLS connection costs a handshake
        limits = http.Limits(max_connections=n, max_keepalive_connections=n, keepalive_expiry=60)
        aiohttp_transport = _aiohttp_transport_class(http) if clients.use_aiohttp else None
        if clients.transport is not None:  # the run's calls are answered without a socket
            inner = _answering_transport(http, clients.transport)
            client_class = DefaultAsyncHttpxClient
        elif aiohttp_transport is not None:  # openai's aiohttp transport: fast under load
            inner, client_class = aiohttp_transport(limits=limits), DefaultAioHttpClient
        else:  # openai without its aiohttp extra: httpx, pooled all the same
            inner, client_class = http.AsyncHTTPTransport(limits=limits), DefaultAsyncHttpxClient
    return AsyncOpenAI(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key or PLACEHOLDER_API_KEY,
        max_retries=0,  # retried per call by the transport, within the rollout's deadline
        http_client=client_class(
            transport=_fixing_transport(http, inner, retry, endpoint.capture_tokens),
            limits=limits,
            timeout=600.0,
        ),
    )


def openai_client(endpoint: LLMEndpoint) -> AsyncOpenAI:
    """The run's ``AsyncOpenAI`` client for ``endpoint``: one per run and endpoint, on
    openai's aiohttp transport, with as many kept-alive connections as the run's
    concurrency, closed when the run ends. Its requests never carry an assistant tool-call
    message with null content (see :func:`fill_assistant_content`), and 429/5xx answers
    and failed connections are retried per call (see :func:`_fixing_transport`).

    Outside a run that pools clients (a sandbox: one rollout per process), a new client
    of the rollout's own, on httpx without kept-alive connections.
    """
    clients = current_model_clients()
    if clients is None:
        return _new_openai_client(endpoint, None)
    pooled = clients.shared(
        ("openai", *endpoint_key(endpoint.base_url), endpoint.capture_tokens),
        lambda: _new_openai_client(endpoint, clients),
        _close_openai,
        kind="openai",
    )
    key = endpoint.api_key or PLACEHOLDER_API_KEY
    if pooled.api_key == key and str(pooled.base_url).rstrip("/") == endpoint.base_url.rstrip("/"):
        return pooled
    # Another key or path on the same server (a served rollout's own: trainers give each
    # rollout its key, some a path of its own) shares the pooled connections: a copy
    # (8 µs) that is never closed itself, not a client per rollout kept while a server runs.
    return pooled.with_options(api_key=key, base_url=endpoint.base_url)


async def _close_openai(client: AsyncOpenAI) -> None:
    await client.close()


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
