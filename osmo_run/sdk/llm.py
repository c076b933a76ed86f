"""A minimal async client for OpenAI-compatible chat completions, stdlib only.

Enough for workflows that run inside sandboxes with nothing installed. Errors carry the
class names osmo-run categorizes by: :class:`RateLimitError` (HTTP 429) and
:class:`ModelAPIError` (other HTTP errors, refused connections, bad responses). The API
key is sent in a header and never appears in an error message. Every answer's token usage
and latency is counted in the running rollout's ``usage`` (the output row's ``usage``).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from typing import Any

from osmo_run.errors import ModelAPIError, RateLimitError
from osmo_run.sdk.context import LLMEndpoint, _current, get_rollout_context
from osmo_run.sdk.types import Message

__all__ = ["ModelAPIError", "RateLimitError", "chat_completion", "record_usage"]


def _endpoint(endpoint: LLMEndpoint | None) -> LLMEndpoint:
    if endpoint is not None:
        return endpoint
    llm = get_rollout_context().llm
    if llm is None:
        raise ValueError(
            "no model endpoint: add an 'llm' section (base_url, model) to the run spec "
            "(for a grader's calls: a 'judge' section)"
        )
    return llm


def _post(url: str, body: bytes, headers: dict[str, str], timeout_sec: float) -> dict[str, Any]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_sec) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip()
        kind = RateLimitError if exc.code == 429 else ModelAPIError
        raise kind(f"{url} answered HTTP {exc.code}: {detail}", status=exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ModelAPIError(f"cannot reach {url}: {reason}") from None
    try:
        data = json.loads(payload)
    except json.JSONDecodeError:
        raise ModelAPIError(
            f"{url} answered something that is not JSON: {payload[:120]!r}"
        ) from None
    if not isinstance(data, dict) or not data.get("choices"):
        raise ModelAPIError(f"{url} answered without 'choices': {str(data)[:200]}")
    return data


async def chat_completion(
    messages: list[Message],
    endpoint: LLMEndpoint | None = None,
    timeout_sec: float = 120.0,
    **params: Any,
) -> dict[str, Any]:
    """POST ``messages`` to ``endpoint`` (default: the rollout's) and return the response.

    The returned dict is the endpoint's JSON plus ``"_latency_sec"``; inside a rollout, the
    call and its ``usage`` are counted with :func:`record_usage`. Raises
    :class:`RateLimitError`, :class:`ModelAPIError`, or ``ValueError`` when no endpoint is
    configured.
    """
    llm = _endpoint(endpoint)
    body = json.dumps({"model": llm.model, "messages": messages, **params}).encode()
    headers = {"Content-Type": "application/json"}
    if llm.api_key:
        headers["Authorization"] = f"Bearer {llm.api_key}"
    started = time.monotonic()
    data = await asyncio.to_thread(_post, llm.chat_completions_url, body, headers, timeout_sec)
    data["_latency_sec"] = time.monotonic() - started
    record_usage(data.get("usage"), data["_latency_sec"])
    return data


def record_usage(usage: object, seconds: float) -> None:
    """Count one model call with an OpenAI-style ``usage`` (a dict, or an object with
    ``prompt_tokens``/``completion_tokens`` or ``input_tokens``/``output_tokens``) in the
    running rollout; does nothing outside a rollout."""
    rollout = _current.get()
    if rollout is None:
        return
    prompt = _tokens(usage, "prompt_tokens", "input_tokens")
    completion = _tokens(usage, "completion_tokens", "output_tokens")
    rollout.record_llm_call(prompt, completion, seconds)


def _tokens(usage: object, *names: str) -> int:
    for name in names:
        value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return 0
