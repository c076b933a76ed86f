"""Token-exact turns (the spec's ``llm.capture: tokens``): what each model call is asked
for and what of its answer is recorded.

With capture on (:attr:`~osmo_run.sdk.context.LLMEndpoint.capture_tokens`), every
chat-completion request of a rollout, from ``chat_completion`` or an agent-framework
integration's transport, also asks for :data:`CAPTURE_FIELDS` (vLLM's names; a field the
caller set keeps the caller's value). From each answer :func:`turn_of` takes, as they came
and never re-tokenised: the prompt's token ids (vLLM's top-level ``prompt_token_ids``), the
completion's (``choices[0].token_ids``), each completion token's logprob
(``choices[0].logprobs.content[*].logprob``), the model, the finish reason and the messages
as sent. The rollout keeps them in call order (:meth:`RolloutContext.record_turn`), also
when it fails, and the run writes them to its turns file.

Where the answer has no ``token_ids`` but each logprob entry carries its token's ``id``
(llama.cpp's server, the embedded model's), those are the completion's ids. An endpoint
whose answers lack prompt or completion ids is said once per endpoint
(:func:`note_missing_ids`), never per call; its turns are recorded with what came. Stdlib
only: this module runs in sandboxes too.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from typing import Any

CAPTURE_FIELDS: dict[str, Any] = {"logprobs": True, "return_token_ids": True}
"""What a captured call asks for besides the caller's own fields: vLLM's OpenAI-compatible
server answers ``return_token_ids`` with ``prompt_token_ids`` and ``choices[i].token_ids``,
and ``logprobs`` with ``choices[i].logprobs.content[*].logprob``."""

TURN_KEYS = (
    "model",
    "finish_reason",
    "messages",
    "prompt_token_ids",
    "completion_token_ids",
    "logprobs",
)
"""The keys of one recorded turn, in the order they are written."""


def with_capture_fields(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` (a request's fields) asking for token ids and logprobs too; the
    caller's own value wins where it set one of :data:`CAPTURE_FIELDS`."""
    return {**CAPTURE_FIELDS, **params}


def turn_of(messages: object, data: dict[str, Any]) -> dict[str, Any]:
    """The turn of one answered call: ``messages`` as sent and ``data`` (the endpoint's
    decoded JSON answer) read for its first choice. A field the answer lacks is ``None``;
    ids and logprobs are kept as the endpoint sent them (lists, not copied). A list of ids
    that are not all non-negative integers is ``None`` (a trainer must never take a string
    or a float for a token), and a logprob that is not a finite number is ``None``."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        choice = {}
    prompt_ids = data.get("prompt_token_ids")
    if prompt_ids is None:  # some servers put it on the choice
        prompt_ids = choice.get("prompt_token_ids")
    completion_ids = _token_ids(choice.get("token_ids"))
    if completion_ids is None:  # llama.cpp's server gives each logprob entry its token's id
        completion_ids = _logprob_ids(choice.get("logprobs"))
    return {
        "model": data.get("model"),
        "finish_reason": choice.get("finish_reason"),
        "messages": messages,
        "prompt_token_ids": _token_ids(prompt_ids),
        "completion_token_ids": completion_ids,
        "logprobs": _logprobs(choice.get("logprobs")),
    }


def missing_ids(turn: dict[str, Any]) -> str | None:
    """What ids the answer of ``turn`` lacked (``"token ids"``, ``"prompt token ids"``,
    ``"completion token ids"``), or ``None`` when it had both."""
    prompt = turn.get("prompt_token_ids") is None
    completion = turn.get("completion_token_ids") is None
    if prompt and completion:
        return "token ids"
    if prompt:
        return "prompt token ids"
    return "completion token ids" if completion else None


def _token_ids(value: object) -> list[int] | None:
    """``value`` when it is a list of token ids (non-negative integers, not booleans)."""
    if isinstance(value, list) and all(type(i) is int and i >= 0 for i in value):
        return value
    return None


def _logprob_ids(value: object) -> list[Any] | None:
    """The token ids of an OpenAI-style ``logprobs`` object whose every entry carries its
    token's ``id`` (llama.cpp's server does; OpenAI and vLLM do not), else ``None``."""
    content = value.get("content") if isinstance(value, dict) else None
    if not isinstance(content, list) or not content:
        return None
    ids = [entry.get("id") if isinstance(entry, dict) else None for entry in content]
    return _token_ids(ids)


def _logprobs(value: object) -> list[Any] | None:
    """Each completion token's logprob from an OpenAI-style ``logprobs`` object
    (``{"content": [{"token", "logprob", ...}, ...]}``), or ``None`` when none came."""
    content = value.get("content") if isinstance(value, dict) else None
    if not isinstance(content, list):
        return None
    return [
        _logprob(entry.get("logprob")) if isinstance(entry, dict) else None for entry in content
    ]


def _logprob(value: object) -> float | None:
    if type(value) is float and math.isfinite(value):
        return value
    if type(value) is int:  # a log probability of 0 written as 0
        return float(value)
    return None


_noted: set[str] = set()
_noted_lock = threading.Lock()

NoticeSink = Callable[[str], None]


def missing_ids_notice(url: str, missing: str = "token ids") -> str:
    """The one line said about an endpoint whose answers lack ``missing`` (see
    :func:`missing_ids`)."""
    return (
        f"llm.capture: {url} answers without usable {missing} (return_token_ids is vLLM's); "
        "its turns are recorded with what came, nothing re-tokenised"
    )


def note_missing_ids(
    url: str,
    missing: str = "token ids",
    noted: set[str] | None = None,
    sink: NoticeSink | None = None,
) -> None:
    """Say :func:`missing_ids_notice` for ``url`` once: once in ``noted`` (a run's set)
    or, without one, once in this process; to ``sink`` (the run's display) or else on
    stderr."""
    with _noted_lock:
        seen = _noted if noted is None else noted
        if url in seen:
            return
        seen.add(url)
    line = missing_ids_notice(url, missing)
    if sink is not None:
        sink(line)
    else:
        print(line, file=sys.stderr, flush=True)
