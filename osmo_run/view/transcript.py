"""A record's messages as a conversation: one turn per message, its text and images, the
tool calls an assistant made (with pretty-printed arguments) and, on a tool message, which
call it answers.

Messages are model output: nothing here is trusted. Text stays text (the templates escape
it); an image is shown only from a ``data:`` URL of a raster type, so a transcript can
never make the browser fetch anything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]+")
_KNOWN_KEYS = {"role", "content", "tool_calls", "tool_call_id", "name"}


@dataclass
class Part:
    kind: str
    """``text``, ``image`` (``text`` is then a ``data:`` URL) or ``json``."""
    text: str


@dataclass
class ToolCall:
    call_id: str
    name: str
    arguments: str
    """Pretty-printed JSON when the arguments parse, else as given."""


@dataclass
class Turn:
    role: str
    parts: list[Part] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    answers: str | None = None
    """On a tool message: the id of the call it answers."""
    answers_name: str | None = None
    """... and that call's function name, when an earlier turn made it."""
    name: str | None = None
    extra: str | None = None
    """Other keys of the message (``reasoning_content``, ...), as JSON."""


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=repr)


def _pretty_arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            return pretty_json(json.loads(arguments))
        except ValueError:
            return arguments
    return pretty_json(arguments)


def _parts(content: Any) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Part("text", content)] if content else []
    if isinstance(content, list):
        parts: list[Part] = []
        for item in content:
            if isinstance(item, str):
                parts.append(Part("text", item))
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                parts.append(Part("text", item["text"]))
            elif isinstance(item, dict) and item.get("type") == "image_url":
                url = item.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                if isinstance(url, str) and _DATA_IMAGE.fullmatch(url):
                    parts.append(Part("image", url))
                else:
                    parts.append(Part("text", f"[image: {str(url)[:200]}]"))
            else:
                parts.append(Part("json", pretty_json(item)))
        return parts
    return [Part("json", pretty_json(content))]


def _tool_calls(value: Any) -> list[ToolCall]:
    calls = []
    for i, call in enumerate(value if isinstance(value, list) else []):
        if not isinstance(call, dict):
            calls.append(ToolCall(f"#{i}", "?", pretty_json(call)))
            continue
        inner = call.get("function")
        function: dict[str, Any] = inner if isinstance(inner, dict) else call
        calls.append(
            ToolCall(
                str(call.get("id") or f"#{i}"),
                str(function.get("name") or "?"),
                _pretty_arguments(function.get("arguments", function.get("input", ""))),
            )
        )
    return calls


def transcript(messages: Any) -> list[Turn]:
    """``messages`` (a record's ``sample.messages``) as turns; anything that is not a list of
    objects still shows, as JSON."""
    if not isinstance(messages, list):
        return [] if messages is None else [Turn("?", [Part("json", pretty_json(messages))])]
    names: dict[str, str] = {}
    turns = []
    for message in messages:
        if not isinstance(message, dict):
            turns.append(Turn("?", [Part("json", pretty_json(message))]))
            continue
        turn = Turn(
            str(message.get("role") or "?"),
            _parts(message.get("content")),
            _tool_calls(message.get("tool_calls")),
            name=str(message["name"]) if message.get("name") else None,
        )
        for call in turn.tool_calls:
            names[call.call_id] = call.name
        if message.get("tool_call_id") is not None:
            turn.answers = str(message["tool_call_id"])
            turn.answers_name = names.get(turn.answers)
        extra = {k: v for k, v in message.items() if k not in _KNOWN_KEYS}
        if extra:
            turn.extra = pretty_json(extra)
        turns.append(turn)
    return turns


def preview(record: dict[str, Any], limit: int = 140) -> str:
    """One line for the rows table: the error, else the last message's text."""
    if record.get("error_message"):
        text = str(record["error_message"])
    else:
        sample = record.get("sample") or {}
        messages = sample.get("messages") if isinstance(sample, dict) else None
        text = ""
        for message in reversed(messages if isinstance(messages, list) else []):
            parts = _parts(message.get("content")) if isinstance(message, dict) else []
            text = " ".join(p.text for p in parts if p.kind == "text")
            if text:
                break
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
