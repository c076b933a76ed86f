"""One dataset row (a decoded object, from any file format) into an :class:`ExecutionRequest`.

Two row styles are accepted:

* osmosis columns: ``user_prompt`` (and optional ``system_prompt``), ``ground_truth`` or
  ``label``, ``metadata`` (an object or a JSON string of one);
* chat: ``messages`` or ``prompt`` (a message list, or a string for one user message),
  plus ``label``.

Columns that say different things are refused rather than one chosen silently: two of
``messages``/``prompt``/``user_prompt``, ``system_prompt`` without ``user_prompt``,
``label`` and ``ground_truth`` with different values, an extra column and a ``metadata``
key of the same name with different values.

A row without a prompt (no prompt column, or an empty one: ``""``, ``[]``, a null) is valid
when it carries metadata: the workflow gets an empty prompt and builds its own from the
metadata. A row with neither is refused.

An optional ``id`` names the row: any non-empty string, or an integer (kept as its decimal
text); it is data, never a path (see :mod:`osmo_run.sdk.names`). Other columns are kept in
the row's metadata.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from osmo_run.sdk.types import ExecutionRequest

KNOWN_COLUMNS = frozenset(
    {
        "id",
        "messages",
        "prompt",
        "user_prompt",
        "system_prompt",
        "label",
        "ground_truth",
        "metadata",
    }
)
_PROMPT_COLUMNS = ("messages", "prompt", "user_prompt")


class RowError(ValueError):
    """What is wrong with one row, without its position (the reader adds ``file:line``)."""


def loads(text: str) -> Any:
    """``json.loads(text)``. Raises :class:`json.JSONDecodeError` for text that is not
    JSON, and :class:`RowError` ("not valid JSON (...)") for an integer of more digits than
    Python converts (4,300 by default), which ``json`` raises as a plain ``ValueError``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        raise RowError(
            f"not valid JSON (an integer of more than {sys.get_int_max_str_digits()} digits; "
            "write it as a string)"
        ) from None


def check_id(value: object) -> str:
    """The row id ``value`` names: a non-empty string as is, an integer as its decimal text.

    Raises :class:`RowError` for anything else (a float, a bool, a null, ``""``).
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        kind = "null" if value is None else type(value).__name__
        raise RowError(f"'id' must be a non-empty string or an integer, got {kind}")
    row_id = str(value)
    if not row_id:
        raise RowError("'id' is empty: give every row a non-empty id, or drop the id column")
    return row_id


def _messages(value: object, column: str) -> list[dict[str, Any]]:
    if value is None or (isinstance(value, str | list) and not value):
        return []  # no prompt: the caller decides whether the row's metadata makes up for it
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise RowError(f"'{column}' must be a list of messages or a string")
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise RowError(f'\'{column}[{i}]\' must be an object like {{"role": "user", ...}}')
        if not isinstance(message.get("role"), str):
            raise RowError(f"'{column}[{i}]' has no string 'role'")
    return value


def _prompt(obj: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The prompt's messages (``[]`` for none) and the column that gave it, if any."""
    given = [column for column in _PROMPT_COLUMNS if column in obj]
    if len(given) > 1:
        raise RowError(f"'{given[0]}' and '{given[1]}' both give the prompt: keep one of them")
    if given and given[0] != "user_prompt":
        if "system_prompt" in obj:
            raise RowError(
                f"'system_prompt' goes with 'user_prompt'; with '{given[0]}', put the system "
                "message in it"
            )
        return _messages(obj[given[0]], given[0]), given[0]
    user = obj.get("user_prompt")
    if user is not None and not isinstance(user, str):
        raise RowError(f"'user_prompt' must be a string, got {type(user).__name__}")
    system = obj.get("system_prompt")
    if system is not None and not isinstance(system, str):
        raise RowError(f"'system_prompt' must be a string, got {type(system).__name__}")
    if not user:
        if system:
            raise RowError("'system_prompt' without a 'user_prompt': give the user's message")
        return [], given[0] if given else None
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user})
    return messages, "user_prompt"


def shown(value: Any) -> str:
    """``repr(value)``, cut to 40 characters for an error message."""
    return repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"


def metadata_object(metadata: object) -> dict[str, Any]:
    """A ``metadata`` column's value as a dict: an object, a JSON string of one, or nothing
    (``None``, ``""``: ``{}``). Raises :class:`RowError` for anything else."""
    if isinstance(metadata, str) and metadata.strip():
        try:
            metadata = loads(metadata)
        except RowError as exc:
            raise RowError(f"'metadata' is a string but {exc}") from None
        except json.JSONDecodeError:
            raise RowError("'metadata' is a string but not a JSON object") from None
    if metadata is None or metadata == "":
        metadata = {}
    if not isinstance(metadata, dict):
        raise RowError(f"'metadata' must be an object, got {type(metadata).__name__}")
    return metadata


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = metadata_object(obj.get("metadata"))
    extra = {k: v for k, v in obj.items() if k not in KNOWN_COLUMNS}
    for key, value in extra.items():
        if key in metadata and metadata[key] != value:
            raise RowError(
                f"'{key}' is a column and a 'metadata' key with different values "
                f"({shown(value)} and {shown(metadata[key])}): keep one of them"
            )
    return {**metadata, **extra} if extra else metadata


def _label(obj: dict[str, Any]) -> Any:
    if "label" in obj and "ground_truth" in obj and obj["label"] != obj["ground_truth"]:
        raise RowError(
            f"'label' and 'ground_truth' differ ({shown(obj['label'])} and "
            f"{shown(obj['ground_truth'])}): give one of them"
        )
    label = obj.get("label", obj.get("ground_truth"))
    return None if label == "" else label


def parse_row(
    obj: object,
    line: int,
    agent_timeout_sec: float | None,
    grader_timeout_sec: float | None,
) -> ExecutionRequest:
    """Turn one decoded row into a request; raise :class:`RowError` saying what is wrong.

    ``line`` (its line or row number) names a row without an ``id``.
    """
    if not isinstance(obj, dict):
        raise RowError(f"a row must be a JSON object, got {type(obj).__name__}")
    row_id = check_id(obj["id"]) if "id" in obj else str(line)
    prompt, column = _prompt(obj)
    metadata = _metadata(obj)
    if not prompt and not metadata:
        what = f"'{column}' is empty" if column else "row has no prompt"
        raise RowError(
            f"{what} and no metadata: give 'messages', 'prompt' or 'user_prompt', or "
            "'metadata' for a workflow that builds its prompt from it"
        )
    return ExecutionRequest(
        id=row_id,
        prompt=prompt,
        label=_label(obj),
        metadata=metadata,
        agent_timeout_sec=agent_timeout_sec,
        grader_timeout_sec=grader_timeout_sec,
    )
