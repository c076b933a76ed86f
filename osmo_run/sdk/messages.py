"""Error messages short enough for a result row and a printed line.

What goes wrong outside a workflow often comes back as a wall of text: a proxy's HTML error
page inside an SDK's exception, Harbor's ``docker compose`` failure with the whole command
line and its output, a traceback. A row and a printed line keep the first meaningful line
of it; whoever records the row keeps the full text elsewhere and points to it
(:class:`osmo_run.sdk.types.ExecutionResult` holds it as ``error_detail``).

Stdlib only: the SDK runs this inside sandboxes too.
"""

from __future__ import annotations

import html
import re

MAX_MESSAGE_CHARS = 1000
"""A line longer than this is cut (an ellipsis marks the cut): a safety net for one-line
blobs, long enough for messages that name a few paths."""

_HTML_START = re.compile(r"<!doctype\s+html|<html[\s>]", re.IGNORECASE)
"""Where an HTML document starts; a message that only names a tag (``<body>``) is text."""
_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_INVISIBLE_BLOCKS = re.compile(
    r"<(script|style|head)\b[^>]*>.*?</\1\s*>|<!--.*?-->", re.IGNORECASE | re.DOTALL
)
_TAG = re.compile(r"<[^>]+>")
_COMPOSE = re.compile(
    r"^(?P<head>.*?)\s*Command: .*?Return code: (?P<code>-?\d+)\.\s*"
    r"Stdout: (?P<out>.*?)\.?\s*Stderr: (?P<err>.*?)\.?\s*$",
    re.DOTALL,
)
_LOCATION = re.compile(r" \(at [^\n]+:\d+ in [^\s()]+\)$")
"""Where osmo-run says an exception was raised (``describe_exception``): kept after a cut."""
_TRACEBACK = "Traceback (most recent call last):"
_MEANINGFUL = re.compile(r"[^\W_]")  # a letter or a digit: not a rule, a brace or blank


def _meaningful_lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if _MEANINGFUL.search(line)]


def _html_text(page: str) -> str:
    """What a person reads first on an HTML page: its title, else its first text line."""
    title = _TITLE.search(page)
    if title is not None:
        words = " ".join(html.unescape(_TAG.sub(" ", title.group(1))).split())
        if words:
            return words
    body = html.unescape(_TAG.sub("\n", _INVISIBLE_BLOCKS.sub("", page)))
    lines = _meaningful_lines(body)
    return lines[0] if lines else "an HTML page"


def _output_line(output: str) -> str:
    """The line of a command's output that says what failed: the first naming an error
    (compose names the service or image there, before the daemon's generic line), else the
    last line. Harbor writes an output it did not capture as ``None``."""
    lines = [line for line in _meaningful_lines(output) if line != "None"]
    errors = [line for line in lines if "error" in line.lower()]
    if errors:
        return errors[0]
    return lines[-1] if lines else ""


def _first_meaningful(text: str) -> str:
    page = _HTML_START.search(text)
    if page is not None:
        before = _meaningful_lines(text[: page.start()])
        prefix = before[0] if before else ""
        return f"{prefix} {_html_text(text[page.start() :])}".strip()
    compose = _COMPOSE.match(text)
    if compose is not None:
        said = _output_line(compose["err"]) or _output_line(compose["out"])
        head = f"{compose['head'].rstrip('.')} (return code {compose['code']})"
        return f"{head}: {said}" if said else head
    lines = _meaningful_lines(text)
    if not lines:
        return " ".join(text.split())
    if lines[0] == _TRACEBACK:
        return lines[-1]  # a traceback ends with the exception it is about
    return lines[0]


def short_message(text: str) -> str:
    """The first meaningful line of ``text``, at most :data:`MAX_MESSAGE_CHARS` long.

    An HTML page becomes its ``<title>`` (or its first line of text), after whatever
    preceded it on its first line (``"Failed to create sandbox: 502 Bad Gateway"``);
    Harbor's ``docker compose`` failure becomes its first sentence, the return code and the
    first output line naming an error; a traceback its last line; any other text its first line
    holding a letter or a digit, with runs of white space made one space. The place an
    exception was raised, ``(at file:line in func)`` at the end of a multi-line message, is
    kept after the cut. A one-line message comes back unchanged (apart from the cut at the
    length limit).
    """
    stripped = text.strip()
    if (
        "\n" not in stripped
        and len(stripped) <= MAX_MESSAGE_CHARS
        and _HTML_START.search(stripped) is None
        and _COMPOSE.match(stripped) is None
    ):
        return stripped
    location = _LOCATION.search(stripped) if "\n" in stripped else None
    suffix = location.group() if location is not None else ""
    line = _first_meaningful(stripped[: location.start()] if location else stripped)
    if len(line) + len(suffix) > MAX_MESSAGE_CHARS:
        line = line[: max(MAX_MESSAGE_CHARS - len(suffix) - 1, 0)].rstrip() + "…"
    return line + suffix
