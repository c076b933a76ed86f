"""Text from workflows (exception messages, row ids) made safe to show: on one line with
its control characters visible in plain output, and escaped for Markdown reports.

An exception's text can hold ANSI escapes (a colour, a screen clear), raw newlines and
carriage returns, bidirectional overrides and HTML: printed as they are, one failure
becomes several lines, recolours a CI log or renders as markup in a step summary.
"""

from __future__ import annotations

import re

_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""C0 and C1 controls (ESC, newline, carriage return, tab...), DEL, the Unicode line and
paragraph separators, the bidirectional embeddings, overrides and isolates, and surrogates
(a lone one, from a ``\ud83d`` escape in JSON data, cannot be encoded as UTF-8: printed or
written as it is, it stops the run)."""

_MARKDOWN_SPECIAL = re.compile(r"[\\`*\[\]|~<>&]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
"""Characters Markdown (GitHub's) or HTML would act on in a table cell; an underscore only
where it could start or end emphasis (``agent_error`` stays as it is)."""


def one_line(text: str) -> str:
    """``text`` with every control character written as its Python escape (``\\n``,
    ``\\x1b``, ``\\u2028``): one line, nothing a terminal acts on."""
    return _INVISIBLE.sub(lambda m: ascii(m.group())[1:-1], text)


def _markdown_escape(match: re.Match[str]) -> str:
    char = match.group()
    return {"<": "&lt;", ">": "&gt;", "&": "&amp;"}.get(char, "\\" + char)


def markdown_text(text: str, limit: int | None = None) -> str:
    """``text`` for a Markdown document or table cell: :func:`one_line`, cut to ``limit``
    characters (with an ellipsis), then with HTML and Markdown syntax escaped (``|`` never
    splits a cell, ``<b>`` is shown, not rendered)."""
    line = one_line(text)
    if limit is not None and len(line) > limit:
        line = line[: limit - 1] + "…"
    return _MARKDOWN_SPECIAL.sub(_markdown_escape, line)
