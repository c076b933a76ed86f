"""osmosis-ai 0.3.8's rollout protocol at the wire: request bodies in, answers out.

Bodies are parsed here and nowhere else: :func:`parse_rollout_request` and
:func:`parse_cancel_request` turn bytes into validated models or raise
:class:`BadBody` with one line naming the field (a 422). Answers are plain dicts built by
the ``*_answer`` functions, shaped exactly as osmosis's server shapes them.

Where osmo-run's model is richer than the wire's, :func:`wire_result` folds it onto the
wire's enumerations (the README's osmosis table); the results file keeps osmo-run's own
fields.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from osmo_run.sdk.context import checked_base_url
from osmo_run.sdk.types import (
    SAMPLE_REMOVED,
    ErrorCategory,
    ExecutionResult,
    RolloutStatus,
)

POLLING_LEASE_HEADER = "X-Osmosis-Rollout-Lease"

MAX_ID_CHARS = 512
"""A rollout id longer than this is refused: ids are data, kept in every results line."""

MAX_JSON_DEPTH = 64
"""Bodies nested deeper are refused before they are decoded (a stack-exhausting body)."""

MAX_BATCH_ITEMS = 4096
"""The most rollouts one ``POST /rollouts`` admits, and leases one ``POST /rollouts/results``
reads: a request's work stays bounded (a batch over it is a 413), while a trainer's 1,000
rollouts in flight fit in one."""

WIRE_CATEGORIES: dict[ErrorCategory, str] = {
    ErrorCategory.TIMEOUT: "timeout",
    ErrorCategory.VALIDATION_ERROR: "validation_error",
    ErrorCategory.AGENT_ERROR: "agent_error",
    ErrorCategory.RATE_LIMIT: "http_error",
    ErrorCategory.MODEL_API_ERROR: "http_error",
    ErrorCategory.INFRA_ERROR: "agent_error",
    ErrorCategory.INTERNAL_ERROR: "internal_error",
}
"""osmo-run's failure categories on the wire's ``err_category`` (osmosis has no
``rate_limit``, ``model_api_error`` or ``infra_error``: its own server reports a model
endpoint's failure as ``http_error`` and a sandbox's as ``agent_error``)."""

LEASE_EXPIRED_MESSAGE = "polling lease expired"


class BadBody(ValueError):
    """A request body that is not what the route takes: its one-line reason."""


class RolloutRequest(BaseModel):
    """``POST /rollout``'s body (unknown fields ignored, as osmosis ignores them)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=True)

    rollout_id: str = Field(strict=True)
    initial_messages: list[dict[str, Any]]
    chat_completions_url: str = Field(strict=True, min_length=1)
    llm_api_key: str | None = Field(default=None, strict=True)
    label: str | None = Field(default=None, strict=True)
    metadata: dict[str, Any] | None = None
    grade: bool = Field(default=True, strict=True)
    agent_timeout_sec: float | None = None
    grader_timeout_sec: float | None = None
    extra_fields: dict[str, Any] | None = None

    @field_validator("rollout_id")
    @classmethod
    def _one_path_segment(cls, value: str) -> str:
        if not value or value in (".", ".."):
            raise ValueError("must be a non-empty path segment, not '.' or '..'")
        if any(c in value for c in "/\\\x00"):
            raise ValueError("must be one path segment: no '/', '\\' or NUL")
        if len(value) > MAX_ID_CHARS:
            raise ValueError(f"must be at most {MAX_ID_CHARS} characters")
        if not _encodable(value):
            raise ValueError("must be valid Unicode (it holds a lone surrogate)")
        return value

    @field_validator("chat_completions_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        """Refused at admission, not after the rollout spent its deadline retrying a URL
        that can never answer; a URL given whole has its ``/chat/completions`` dropped."""
        return checked_base_url(value)

    @field_validator("llm_api_key")
    @classmethod
    def _key_not_empty(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError("must be omitted or a non-empty string")
        return value

    @field_validator("agent_timeout_sec", "grader_timeout_sec")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be finite; omit it to run unbounded")
        return value


class CancelRequest(BaseModel):
    """``POST /rollout/cancel``'s body: exactly one of ``ids``, ``prefix``, ``all``."""

    model_config = ConfigDict(extra="ignore")

    ids: list[str] | None = None
    prefix: str | None = Field(default=None, strict=True)
    all: bool = Field(default=False, strict=True)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _decode(body: bytes, limit: int = MAX_JSON_DEPTH, too_deep: str | None = None) -> object:
    """``body`` as JSON; :class:`BadBody` for anything else, nesting deeper than ``limit``
    (:data:`MAX_JSON_DEPTH`) included (``too_deep`` is that refusal's line)."""
    too_deep = too_deep or f"body: JSON nested deeper than {limit} levels"
    try:
        data = json.loads(body)
    except UnicodeDecodeError:
        raise BadBody("body: not UTF-8") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise BadBody(f"body: not valid JSON ({exc.msg} at {where})") from None
    except RecursionError:
        raise BadBody(too_deep) from None
    if _depth_over(data, limit):
        raise BadBody(too_deep)
    return data


def _depth_over(value: object, limit: int) -> bool:
    """Whether ``value`` nests containers deeper than ``limit`` (iteratively: no recursion
    limit is reached however deep it is)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


Model = TypeVar("Model", bound=BaseModel)


def _parse(model: type[Model], body: bytes) -> Model:
    return _validate(model, _decode(body))


def _validate(model: type[Model], data: object) -> Model:
    if not isinstance(data, dict):
        raise BadBody(f"body: must be a JSON object, got {_json_type(data)}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadBody(first_problem(exc)) from None


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def first_problem(exc: ValidationError) -> str:
    """One line naming the first invalid field and why (and how many more there are)."""
    problems = exc.errors(include_url=False, include_input=False)
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    message = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}: {message}{more}"


def parse_rollout_request(body: bytes) -> RolloutRequest:
    """The ``POST /rollout`` body; :class:`BadBody` naming the first bad field."""
    return _parse(RolloutRequest, body)


class BatchTooLarge(ValueError):
    """A batch of more than :data:`MAX_BATCH_ITEMS` items (a 413): its one-line reason."""


BatchItem = tuple[str | None, RolloutRequest | BadBody]
"""One item of a batch: the rollout id it names (``None`` when it names none as a string),
and its request or why it is not one."""


def _batch_field(
    data: object, name: str, kind: type[list[Any]] | type[dict[str, Any]], what: str
) -> Any:
    """A batch body's one field ``name``, of ``kind``: :class:`BadBody` for a body or field
    of another shape (``what`` says the field's), :class:`BatchTooLarge` beyond
    :data:`MAX_BATCH_ITEMS` items."""
    if not isinstance(data, dict):
        raise BadBody(f"body: must be a JSON object, got {_json_type(data)}")
    value = data.get(name)
    if not isinstance(value, kind):
        raise BadBody(f"{name}: must be {what}")
    if len(value) > MAX_BATCH_ITEMS:
        raise BatchTooLarge(f"{name}: at most {MAX_BATCH_ITEMS} items per request")
    return value


def parse_rollout_batch(body: bytes) -> list[BatchItem]:
    """``POST /rollouts``'s body, ``{"rollouts": [<a POST /rollout body>, ...]}``: each item
    validated exactly as :func:`parse_rollout_request` validates a body, a bad one as its
    :class:`BadBody` in its place (the others stand). :class:`BadBody` for a body of
    another shape; :class:`BatchTooLarge` beyond :data:`MAX_BATCH_ITEMS` items."""
    too_deep = f"rollouts: an item nests JSON deeper than {MAX_JSON_DEPTH} levels"
    data = _decode(body, MAX_JSON_DEPTH + 2, too_deep)  # an item nests as a single body may
    items: list[Any] = _batch_field(data, "rollouts", list, "an array of POST /rollout bodies")
    parsed: list[BatchItem] = []
    for item in items:
        named = item.get("rollout_id") if isinstance(item, dict) else None
        rollout_id = named if isinstance(named, str) else None
        try:
            parsed.append((rollout_id, _validate(RolloutRequest, item)))
        except BadBody as exc:
            parsed.append((rollout_id, exc))
    return parsed


def parse_lease_batch(body: bytes) -> dict[str, str]:
    """``POST /rollouts/results``'s body, ``{"leases": {"<rollout_id>": "<token>", ...}}``
    (at least one, at most :data:`MAX_BATCH_ITEMS`). :class:`BadBody` for another shape;
    :class:`BatchTooLarge` beyond the bound."""
    what = "an object of rollout_id to polling lease token"
    leases: dict[str, Any] = _batch_field(_decode(body), "leases", dict, what)
    if not leases:
        raise BadBody("leases: must name at least one rollout")
    for token in leases.values():
        if not isinstance(token, str) or not token:
            raise BadBody("leases: each token must be a non-empty string")
    return leases


def parse_cancel_request(body: bytes) -> CancelRequest:
    """The ``POST /rollout/cancel`` body; :class:`BadBody` unless exactly one selector."""
    request = _parse(CancelRequest, body)
    if sum([request.ids is not None, request.prefix is not None, request.all]) != 1:
        raise BadBody("pass exactly one selector: ids, prefix, or all")
    return request


def admission_answer(
    rollout_id: str, token: str, result_wait_timeout_sec: float, polling_lease_timeout_sec: float
) -> dict[str, Any]:
    """The 202 body of an admitted rollout."""
    return {
        "rollout_id": rollout_id,
        "status": "queued",
        "polling_lease_token": token,
        "result_wait_timeout_sec": result_wait_timeout_sec,
        "polling_lease_timeout_sec": polling_lease_timeout_sec,
    }


def progress_answer(rollout_id: str, status: RolloutStatus) -> dict[str, Any]:
    """The 200 body of a rollout still queued, running or grading."""
    return {
        "rollout_id": rollout_id,
        "status": status.value,
        "sample": None,
        "err_message": None,
        "err_category": None,
    }


def lease_expired_answer(rollout_id: str) -> dict[str, Any]:
    """The terminal body of a rollout whose polling lease lapsed."""
    return {
        "rollout_id": rollout_id,
        "status": "failure",
        "sample": None,
        "err_message": LEASE_EXPIRED_MESSAGE,
        "err_category": "lease_expired",
    }


def cancelled_answer(rollout_id: str, message: str | None) -> dict[str, Any]:
    """The terminal body of a rollout cancelled before it ran."""
    return {
        "rollout_id": rollout_id,
        "status": "cancelled",
        "sample": None,
        "err_message": message,
        "err_category": None,
    }


def wire_result(result: ExecutionResult, label: str | None) -> dict[str, Any]:
    """The terminal body of a finished rollout, as osmosis shapes it.

    ``sample`` carries messages, the request's label, the reward (``null`` unless the
    status is success and the sample is kept), ``remove_sample``, metrics and
    ``extra_fields`` (osmo-run's ``info``); a cancelled rollout's ``err_category`` is
    ``null``. A message with a lone surrogate is sent with it replaced.
    """
    status = result.status
    sample = result.sample
    wire_sample: dict[str, Any] | None = None
    if sample is not None:
        removed = sample.remove_sample or result.grader_skipped == SAMPLE_REMOVED
        keep_reward = status is RolloutStatus.SUCCESS and not removed
        wire_sample = {
            "messages": sample.messages,
            "label": label,
            "reward": sample.reward if keep_reward else None,
            "remove_sample": bool(sample.remove_sample),
            "metrics": sample.metrics,
            "extra_fields": result.info,
        }
    category = None
    if status is RolloutStatus.FAILURE and result.error_category is not None:
        category = WIRE_CATEGORIES.get(result.error_category, "agent_error")
    message = result.error_message
    if message is not None and not _encodable(message):
        message = message.encode("utf-8", "replace").decode("utf-8")
    return {
        "rollout_id": result.rollout_id,
        "status": status.value if status.is_terminal else "failure",
        "sample": wire_sample,
        "err_message": message,
        "err_category": category,
    }
