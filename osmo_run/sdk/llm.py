"""A minimal async client for OpenAI-compatible chat completions.

Errors carry the class names osmo-run categorizes by: :class:`RateLimitError` (HTTP 429)
and :class:`ModelAPIError` (other HTTP errors, refused connections, bad responses). 429,
408, 5xx answers and refused or dropped connections are retried per call first
(:mod:`osmo_run.sdk.model_retry`: backoff with jitter, ``Retry-After`` honoured, never past
the rollout's deadline; each retried call counted in ``usage.retried_calls``). The API key
is sent in a header and never appears in an error message. Every answer's token usage and
latency is counted in the running rollout's ``usage`` (the output row's ``usage``).

In a run, calls go through the run's pooled client for the endpoint
(:mod:`osmo_run.sdk.model_clients`: ``aiohttp`` with kept-alive connections, as many as the
run's concurrency); elsewhere (a sandbox, no run) through urllib, stdlib only.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from osmo_run.errors import BudgetExceededError, ModelAPIError, RateLimitError
from osmo_run.sdk.context import LLMEndpoint, _current, get_rollout_context
from osmo_run.sdk.model_budget import refused_by_budget
from osmo_run.sdk.model_clients import current_model_clients
from osmo_run.sdk.model_http import HTTPAnswer, TransportError, post_in_own_thread
from osmo_run.sdk.model_layer import answered, model_call, note_no_token_ids, record_spent
from osmo_run.sdk.model_retry import (
    DEFAULT_POLICY,
    CallRetries,
    is_retryable_status,
    retry_after_sec,
)
from osmo_run.sdk.turns import missing_ids, turn_of, with_capture_fields
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


def _status_error(url: str, answer: HTTPAnswer, note: str = "") -> ModelAPIError:
    """The error for an HTTP error answer; ``note`` (why its retries ended) goes before
    the endpoint's own text, which may run over several lines, so that the row's message
    (the first line) keeps it."""
    detail = answer.body[:300].decode("utf-8", "replace").strip()
    kind = RateLimitError if answer.status == 429 else ModelAPIError
    said = f" ({note})" if note else ""
    return kind(f"{url} answered HTTP {answer.status}{said}: {detail}", status=answer.status)


def _completion(url: str, payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep, a 5,000-digit int
        raise ModelAPIError(
            f"{url} answered something that is not JSON it can read: {payload[:120]!r}"
        ) from None
    if not isinstance(data, dict) or not data.get("choices"):
        raise ModelAPIError(f"{url} answered without 'choices': {str(data)[:200]}")
    return data


async def _post_with_retries(
    url: str, body: bytes, headers: dict[str, str], timeout_sec: float
) -> HTTPAnswer:
    """The first answer that is not worth retrying; raises ``ModelAPIError`` when the
    tries run out on a retryable one (or on no answer at all), its message saying why
    they ended. While a retry is pending, the rollout's ``retrying`` holds the error it
    would end with, so that a deadline passing meanwhile ends the rollout with it."""
    clients = current_model_clients()
    retries = CallRetries(DEFAULT_POLICY if clients is None else clients.retry)
    rollout = _current.get()
    pending: ModelAPIError | None = None
    cancelled = False
    try:
        while True:
            first = retries.tries == 1
            answer, error, retry_after = await _try_once(url, body, headers, timeout_sec, first)
            if error is None:
                assert answer is not None
                return answer
            wait = retries.next_wait(retry_after)
            if wait is None:
                raise _with_note(error, answer, url, retries.gave_up_because)
            if rollout is not None:
                note = "the rollout's deadline passed while it waited to retry; gave up after"
                pending = _with_note(error, answer, url, f"{note} {retries.tries - 1} tries")
                rollout.retrying = pending
            await asyncio.sleep(wait)
    except asyncio.CancelledError:
        # The rollout's deadline (or a stop) while it waited or tried again: ``retrying``
        # stays, so the rollout ends with the error it was retrying, not as a timeout.
        cancelled = True
        raise
    finally:
        if (
            not cancelled
            and rollout is not None
            and pending is not None
            and rollout.retrying is pending
        ):
            rollout.retrying = None  # another call of the rollout may be retrying its own


async def _try_once(
    url: str, body: bytes, headers: dict[str, str], timeout_sec: float, first: bool = True
) -> tuple[HTTPAnswer, None, None] | tuple[HTTPAnswer | None, ModelAPIError, float | None]:
    """One try, under the run's limit for the endpoint and its budget
    (:func:`~osmo_run.sdk.model_layer.model_call`: ``BudgetExceededError`` when spent):
    its answer when it is not worth retrying, else the answer (if any), the error it stands
    for and the wait the endpoint asked for. Raises ``ModelAPIError`` for a try that ran
    out of its own time (not retried). ``first``: the call's first try."""
    try:
        async with model_call(url, first) as slot:
            clients = current_model_clients()  # None once the run closed them (abandoned row)
            if clients is None:
                answer = await post_in_own_thread(url, body, headers, timeout_sec)
            else:
                answer = await clients.post(url, body, headers, timeout_sec)
            slot.done(answered(answer.status, answer.headers))
    except TransportError as exc:
        if not exc.retryable:
            raise ModelAPIError(str(exc)) from None
        return None, ModelAPIError(str(exc)), None
    refused = refused_by_budget(answer.status, answer.headers, answer.body)
    if refused is not None:  # a Harbor trial's call, refused by the run's model gateway
        raise BudgetExceededError(refused)
    if not is_retryable_status(answer.status):
        return answer, None, None
    return answer, _status_error(url, answer), retry_after_sec(answer.headers)


def _with_note(
    error: ModelAPIError, answer: HTTPAnswer | None, url: str, note: str
) -> ModelAPIError:
    """``error`` saying why its call's tries ended."""
    if answer is not None:
        return _status_error(url, answer, note)
    return ModelAPIError(f"{error.args[0]} ({note})")


async def chat_completion(
    messages: list[Message],
    endpoint: LLMEndpoint | None = None,
    timeout_sec: float = 120.0,
    **params: Any,
) -> dict[str, Any]:
    """POST ``messages`` to ``endpoint`` (default: the rollout's) and return the response.

    The returned dict is the endpoint's JSON plus ``"_latency_sec"`` (retries and their
    waits included); inside a rollout, the call and its ``usage`` are counted with
    :func:`record_usage`. With the endpoint's ``capture_tokens`` (``llm.capture: tokens``)
    the request also asks for token ids and logprobs and the rollout records the call's
    turn (:mod:`osmo_run.sdk.turns`). ``timeout_sec`` bounds each try. Raises
    :class:`RateLimitError`, :class:`ModelAPIError` (once per-call retries are spent), or
    ``ValueError`` when no endpoint is configured.
    """
    llm = _endpoint(endpoint)
    if llm.capture_tokens:  # the spec's llm.capture: tokens
        params = with_capture_fields(params)
    body = json.dumps({"model": llm.model, "messages": messages, **params}).encode()
    headers = {"Content-Type": "application/json"}
    if llm.api_key:
        headers["Authorization"] = f"Bearer {llm.api_key}"
    url = llm.chat_completions_url
    started = time.monotonic()
    answer = await _post_with_retries(url, body, headers, timeout_sec)
    if answer.status >= 400:
        raise _status_error(url, answer)
    data = _completion(url, answer.body)
    data["_latency_sec"] = time.monotonic() - started
    record_usage(data.get("usage"), data["_latency_sec"], llm.model)
    rollout = _current.get()
    if rollout is not None:  # kept for a rollout that fails later without a sample
        choice = data["choices"][0]
        reply = choice.get("message") if isinstance(choice, dict) else None
        sent = list(messages)  # a copy: the caller appends to its list
        rollout.record_call(sent, reply)
        if llm.capture_tokens:
            turn = turn_of(sent, data)
            rollout.record_turn(turn)
            if missing := missing_ids(turn):
                note_no_token_ids(url, missing)
    return data


def record_usage(usage: object, seconds: float, model: str | None = None) -> None:
    """Count one model call with an OpenAI-style ``usage`` (a dict, or an object with
    ``prompt_tokens``/``completion_tokens`` or ``input_tokens``/``output_tokens``) in the
    running rollout, and its tokens against the run's budget (priced as ``model``'s,
    default the run's model); does nothing outside a rollout and a run.

    A count that is not a finite non-negative integer (``NaN``, ``-5``, ``2.5``, ``"12"``)
    is not counted, with a warning in the row: what an endpoint reports about its usage
    never fails the call it answered.
    """
    rollout = _current.get()
    prompt, completion, uncounted, unreadable = usage_tokens(usage)
    if rollout is not None:
        for name, shown in unreadable:
            rollout.warn(f"the model's usage.{name} {shown} is not a token count; not counted")
    record_spent(prompt, completion, model, uncounted)
    if rollout is not None:
        rollout.record_llm_call(prompt, completion, seconds)


def usage_tokens(usage: object) -> tuple[int, int, str | None, list[tuple[str, str]]]:
    """An OpenAI-style ``usage`` (see :func:`record_usage`) read as ``(prompt tokens,
    completion tokens, uncounted, unreadable)``: ``uncounted`` names the first field it
    lacks or holds unreadable (``None`` when both counts were read), ``unreadable`` lists
    ``(field, the value shown)`` for each value that is not a token count (counted 0)."""
    counts: list[int] = []
    uncounted = None
    unreadable: list[tuple[str, str]] = []
    for names in (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens")):
        count, bad = _tokens(usage, *names)
        if bad is not None:
            uncounted = uncounted or bad[0]
            unreadable.append(bad)
        elif count is None:
            uncounted = uncounted or names[0]
        counts.append(count or 0)
    return counts[0], counts[1], uncounted, unreadable


_MAX_TOKENS = 10**15
"""More tokens than any call reports: a larger count is an endpoint's error."""


def _tokens(usage: object, *names: str) -> tuple[int | None, tuple[str, str] | None]:
    """The first of ``names`` that ``usage`` holds, as a token count (``None`` when it holds
    none of them), and ``(name, the value shown)`` when the value held is not a token count
    (the count is then 0)."""
    for name in names:
        value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
        if value is None:
            continue
        integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if integral and not isinstance(value, bool) and 0 <= value <= _MAX_TOKENS:
            return int(value), None
        return 0, (name, _shown(value))
    return None, None


def _shown(value: object) -> str:
    """``value`` for a warning, at most 40 characters."""
    if isinstance(value, int) and value > _MAX_TOKENS:
        return "(more than 10**15)"  # repr() of a long enough int raises
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
