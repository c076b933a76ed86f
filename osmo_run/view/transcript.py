"""A record's messages as a conversation: one turn per message, its text and images, the
tool calls an assistant made (with pretty-printed arguments) and, on a tool message, which
call it answers.

Messages are model output: nothing here is trusted. A message's text is rendered as
Markdown by markdown-it-py (a maintained CommonMark parser) with raw HTML off, so any
markup in it comes out escaped, as text; links it allows are http(s) and mail only, and
Markdown images are off (the page's CSP would block them anyway). Tool output stays text
(monospaced). An image part is shown only from a ``data:`` URL of a raster type, so a
transcript can never make the browser fetch anything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from markupsafe import Markup

_DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]+")
_KNOWN_KEYS = {"role", "content", "tool_calls", "tool_call_id", "name"}
_REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")
"""Message keys holding a model's reasoning: shown collapsed, apart from the answer."""
_FOLD_CHARS = 1500
_FOLD_LINES = 25
_FOLD_TOOL_LINES = 12
"""Longer turns (tool results sooner) are collapsed behind their first line."""
_SAFE_LINK = re.compile(r"(?:https?:|mailto:|#)", re.IGNORECASE)


@cache
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    parser.enable("table").enable("strikethrough")
    parser.disable("image")
    # markdown-it's documented hook for which link targets to keep (stricter than its
    # default, which keeps any scheme but javascript:, vbscript:, file: and most data:)
    parser.validateLink = lambda url: bool(_SAFE_LINK.match(url.strip()))  # type: ignore[method-assign]
    return parser


def markdown_html(text: str) -> Markup:
    """``text`` rendered as Markdown, raw HTML off: every ``<`` of the text is escaped."""
    return Markup(_markdown().render(text).strip())


@dataclass
class Part:
    kind: str
    """``text``, ``image`` (``text`` is then a ``data:`` URL) or ``json``."""
    text: str
    html: Markup | None = None
    """The text rendered as Markdown (message text, not tool output)."""


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
    """Other keys of the message with a value, as JSON (empty ones are left out)."""
    reasoning: str | None = None
    """The model's reasoning (``reasoning_content`` and the like), shown collapsed."""
    fold: str | None = None
    """For a long turn: the line shown while it is collapsed."""


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
        reasoning = [message.get(k) for k in _REASONING_KEYS]
        texts = [r if isinstance(r, str) else pretty_json(r) for r in reasoning if r]
        turn.reasoning = "\n\n".join(texts) or None
        extra = {
            k: v
            for k, v in message.items()
            if k not in _KNOWN_KEYS and k not in _REASONING_KEYS and v not in (None, "", [], {})
        }
        if extra:
            turn.extra = pretty_json(extra)
        if turn.role != "tool":
            for part in turn.parts:
                if part.kind == "text":
                    part.html = markdown_html(part.text)
        turn.fold = _fold_line(turn)
        turns.append(turn)
    return turns


def _fold_line(turn: Turn) -> str | None:
    """The line a long turn shows while collapsed, or ``None`` for a short one."""
    text = "\n".join(p.text for p in turn.parts if p.kind != "image")
    text += "".join(c.arguments for c in turn.tool_calls)
    lines = text.count("\n") + 1
    limit = _FOLD_TOOL_LINES if turn.role == "tool" else _FOLD_LINES
    if len(text) <= _FOLD_CHARS and lines <= limit:
        return None
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = first if len(first) <= 120 else first[:119] + "…"
    return f"{first} — {lines:,} lines, {len(text):,} characters: show all"


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
