"""Workflow text shown safely: one line with visible controls, and escaped Markdown."""

from __future__ import annotations

import pytest

from osmo_run.run.writing.text import markdown_text, one_line


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain words", "plain words"),
        ("two\nlines", "two\\nlines"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("cr\rtab\tnul\x00del\x7f", "cr\\rtab\\tnul\\x00del\\x7f"),
        ("sep\u2028par\u2029rlo\u202e", "sep\\u2028par\\u2029rlo\\u202e"),
        ("émoji 🎉 ok", "émoji 🎉 ok"),
    ],
)
def test_one_line_writes_control_characters_as_escapes(text: str, shown: str) -> None:
    assert one_line(text) == shown


def test_markdown_text_escapes_html_and_markdown_and_keeps_intraword_underscores() -> None:
    assert markdown_text("<b>x</b> & y") == "&lt;b&gt;x&lt;/b&gt; &amp; y"
    assert markdown_text("a | b") == "a \\| b"
    assert markdown_text("*em* `code` [link](u) ~s~") == "\\*em\\* \\`code\\` \\[link\\](u) \\~s\\~"
    assert markdown_text("agent_error _em_") == "agent_error \\_em\\_"
    assert markdown_text("back\\slash\n") == "back\\\\slash\\\\n"


def test_markdown_text_cuts_before_escaping() -> None:
    cut = markdown_text("<" * 50, limit=10)
    assert cut == "&lt;" * 9 + "…"
