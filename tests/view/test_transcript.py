"""A record's messages as turns: Markdown rendered with raw HTML off, what is folded,
what is left out."""

from __future__ import annotations

from osmo_run.view.transcript import markdown_html, transcript
from tests.view.conftest import MARKUP


def test_markdown_is_rendered_with_every_markup_of_the_text_escaped() -> None:
    html = str(markdown_html(f"**bold** `code`\n\n{MARKUP}\n\n<b>raw</b>"))
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert "<img" not in html and "<script" not in html and "<b>" not in html
    assert "&lt;script&gt;window.__pwned=2&lt;/script&gt;" in html
    assert "<a" not in str(markdown_html("[x](javascript:alert(1))"))
    assert "<img" not in str(markdown_html("![i](https://e.test/i.png)"))  # images off
    assert '<a href="https://e.test/">' in str(markdown_html("[docs](https://e.test/)"))


def test_empty_fields_are_left_out_and_reasoning_kept_apart() -> None:
    turns = transcript(
        [
            {"role": "assistant", "content": "hi", "reasoning_content": None, "refusal": ""},
            {"role": "assistant", "content": "ok", "reasoning_content": "think", "audio": {"a": 1}},
            {"role": "tool", "tool_call_id": "c", "content": "\n".join(["x"] * 30)},
        ]
    )
    assert turns[0].extra is None and turns[0].reasoning is None
    assert turns[1].reasoning == "think" and turns[1].extra is not None
    assert "audio" in turns[1].extra and "reasoning" not in turns[1].extra
    assert turns[0].fold is None and turns[2].fold is not None
    assert turns[2].parts[0].html is None  # tool output stays text
