"""A browser test with no run behind it, for ``test_browser_gate`` (which runs this file in
a nested pytest: it is not collected on its own, its name does not start with test_)."""

from __future__ import annotations

from typing import Any


def test_chromium_shows_a_page(page: Any) -> None:
    page.set_content("<p id=hello>osmo-run</p>")
    assert page.inner_text("#hello") == "osmo-run"
