"""The row page shows a rollout's captured turns (``llm.capture: tokens``) under its
transcript: one table row per call with its token counts, the ids and logprobs in a
closed ``<details>``; a 10,000-token turn keeps the page fast."""

from __future__ import annotations

import time
from pathlib import Path

from starlette.testclient import TestClient

from osmo_run.run.writing.turns import turns_line
from osmo_run.view.catalog import Catalog
from osmo_run.view.server import Viewer, create_app
from tests.view import records
from tests.view.test_export import export
from tests.view.test_server import key_of


def _turn(prompt: int, completion: int, base: int) -> dict[str, object]:
    return {
        "model": "stub-model",
        "finish_reason": "stop",
        "messages": [{"role": "user", "content": "hi"}],
        "prompt_token_ids": list(range(base, base + prompt)),
        "completion_token_ids": list(range(base + prompt, base + prompt + completion)),
        "logprobs": [-0.5] * completion,
    }


def _captured_run(tmp_path: Path) -> Path:
    """Three rows; the first made two captured calls, the second one of 10,000 + 10,000."""
    results = records.write(
        tmp_path / "run" / "results.jsonl", [records.record(i) for i in range(3)]
    )
    big = _turn(10_000, 10_000, 7_000_000)
    lines = [
        turns_line("r00000", [_turn(3, 2, 11), _turn(5, 1, 901)]),
        turns_line("r00001", [big]),
    ]
    results.with_name("results.turns.jsonl").write_text("".join(line + "\n" for line in lines))
    return results


def test_the_row_page_shows_each_captured_call_with_counts_and_closed_ids(
    tmp_path: Path,
) -> None:
    results = _captured_run(tmp_path)
    viewer = Viewer(Catalog.open([results]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1:8000") as client:
        key = key_of(client)
        page = client.get(f"/runs/{key}/rows/0").text
        assert "<h2>Captured turns</h2>" in page
        assert page.index("<h2>Transcript</h2>") < page.index("<h2>Captured turns</h2>")
        assert page.count('<details class="captured-ids"') == 2
        assert '<details class="captured-ids" id="captured-1"><summary' in page  # closed
        assert '<pre class="ids">11,12,13</pre>' in page
        assert '<pre class="ids">906</pre>' in page
        assert "-0.5000" in page

        started = time.perf_counter()
        heavy = client.get(f"/runs/{key}/rows/1")
        elapsed = time.perf_counter() - started
        assert heavy.status_code == 200
        assert "10,000" in heavy.text and ",7019999</pre>" in heavy.text
        print(f"10k-token row page: {elapsed * 1000:.0f} ms")
        assert elapsed < 5.0, elapsed  # generous: the machine may be busy

        plain = client.get(f"/runs/{key}/rows/2").text
        assert "Captured turns" not in plain


def test_the_html_export_shows_the_counts_but_not_every_id(tmp_path: Path) -> None:
    html, _ = export(_captured_run(tmp_path), tmp_path)
    assert html.count('id="captured-turns"') == 2  # the two rows that captured
    assert "10,000" in html
    assert "7019999" not in html and 'class="captured-ids"' not in html
