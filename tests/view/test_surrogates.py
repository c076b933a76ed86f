"""A lone surrogate (a ``\\ud83d`` escape in the dataset: valid JSON, no UTF-8) in a row's
id, prompt, answer, metrics, info and error: every page of the viewer answers 200 and
shows it as its escape, the search finds the row, and ``view --export`` writes the file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from osmo_run.view.catalog import Catalog
from osmo_run.view.server import Viewer, allowed_hosts, create_app
from tests.conftest import CLI

BROKEN = "broken emoji \ud83d here"


@pytest.fixture
def surrogate_run(tmp_path: Path) -> Path:
    rows = [
        {"id": "fails", "prompt": BROKEN, "detail": "\udc00"},
        {"id": "answers", "prompt": BROKEN, "ok": True},
        {"id": "id \udfff", "prompt": "plain", "ok": True},
    ]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))  # ASCII: \ud83d escapes
    results = tmp_path / "runs" / "s" / "results.jsonl"
    workflow = "tests.cli.hostile_workflows:QuotingWorkflow"
    # a process of its own: the browser tests before these leave an event loop running
    # on this thread, and the in-process CLI cannot start its own under it
    proc = CLI(tmp_path).local(
        data, "--workflow", workflow, "-o", results, "--plain", in_process=False
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return results.parent


@pytest.fixture
def client(surrogate_run: Path, tmp_path: Path) -> Iterator[TestClient]:
    viewer = Viewer(Catalog.open([surrogate_run]), tmp_path / "cache")
    app = create_app(viewer, allowed_hosts("127.0.0.1", 8000))
    with TestClient(app, base_url="http://127.0.0.1:8000") as test_client:
        yield test_client


def test_every_page_of_a_run_with_lone_surrogates_answers(client: TestClient) -> None:
    index = client.get("/")
    assert index.status_code == 200
    start = index.text.index('href="/runs/') + len('href="/runs/')
    key = index.text[start : index.text.index('"', start)]
    page = client.get(f"/runs/{key}")
    assert page.status_code == 200, page.text
    assert "broken emoji \\ud83d here" in page.text
    assert client.get(f"/runs/{key}/state").status_code == 200
    for position in range(3):
        row = client.get(f"/runs/{key}/rows/{position}")
        assert row.status_code == 200, row.text
    found = client.get(f"/runs/{key}", params={"q": "emoji"})
    assert found.status_code == 200 and "fails" in found.text and "answers" in found.text
    escaped = client.get(f"/runs/{key}", params={"q": "\\ud83d"})
    assert escaped.status_code == 200


def test_view_export_of_a_run_with_lone_surrogates_writes_the_file(
    surrogate_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    proc = CLI(tmp_path)("view", surrogate_run, "--export", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = out.read_text(encoding="utf-8")
    assert "broken emoji \\ud83d here" in html
