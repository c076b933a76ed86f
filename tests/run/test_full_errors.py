"""A failed row whose error is a wall of text (an HTML page, compose output) keeps its
first meaningful line in the row and the printed line; the whole text goes to a file the
row's ``backend.error_log`` names, with secrets masked, and the printed line points to it."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from osmo_run import ErrorCategory, ExecutionRequest, ExecutionResult
from osmo_run.run.executing.display import NullDisplay
from osmo_run.run.executing.runner import Runner, WorkItem
from osmo_run.run.reading.dataset import DatasetRow
from osmo_run.run.writing.output import OutputWriter
from osmo_run.testing import FakeBackend
from tests.conftest import CLI, WriteJsonl, read_jsonl
from tests.harbor.fake_daytona import BAD_GATEWAY_PAGE


def test_local_row_keeps_the_title_and_points_to_the_whole_page(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OSMO_TEST_PAGE", BAD_GATEWAY_PAGE)
    row = {"id": "page", "prompt": "hi", "metadata": {"raise_env": "OSMO_TEST_PAGE"}}
    data = write_jsonl([row])
    output = tmp_path / "out" / "results.jsonl"
    proc = cli.local(data, "--workflow", "tests.workflows:ScriptedWorkflow", "-o", output)
    assert proc.returncode == 1, proc.stderr
    [row] = read_jsonl(output)
    message = row["error_message"]
    assert message.startswith("RuntimeError: the server refused 502 Bad Gateway"), message
    assert "<" not in message and "\n" not in message
    full = Path(row["backend"]["error_log"])
    assert full.parent == tmp_path / "out" / "errors"
    text = full.read_text(encoding="utf-8")
    assert "<title>502 Bad Gateway</title>" in text and "Request id: 7f3c9a1e" in text
    assert stat.S_IMODE(full.stat().st_mode) == 0o600
    [failed_line] = [line for line in proc.stdout.splitlines() if line.startswith("FAILURE")]
    assert f"(full text: {full})" in failed_line
    assert "<html" not in proc.stdout + proc.stderr


def test_the_full_text_is_masked_and_a_one_line_error_gets_no_file(tmp_path: Path) -> None:
    secret = "sk-live-0123456789"
    texts = {
        "long": f"RuntimeError: upstream said\n<p>key {secret} rejected</p>\nmore",
        "short": "ValueError: bad input",
    }

    def respond(request: ExecutionRequest) -> ExecutionResult:
        return ExecutionResult.failure(request.id, ErrorCategory.AGENT_ERROR, texts[request.id])

    items = []
    for index, row_id in enumerate(texts):
        request = ExecutionRequest(id=row_id, prompt=[{"role": "user", "content": "x"}])
        items.append(WorkItem(DatasetRow(index, index + 1, row_id, request), 0, request))
    output = tmp_path / "results.jsonl"

    async def main() -> None:
        with OutputWriter(output, (secret,)) as writer:
            await Runner(FakeBackend(respond), writer, NullDisplay()).run(items)

    asyncio.run(main())
    rows = {row["row_id"]: row for row in read_jsonl(output)}
    assert rows["long"]["error_message"] == "RuntimeError: upstream said"
    full = Path(rows["long"]["backend"]["error_log"]).read_text(encoding="utf-8")
    assert secret not in full and "key *** rejected" in full
    assert rows["short"]["error_message"] == "ValueError: bad input"
    assert "error_log" not in rows["short"]["backend"]
    assert [p.name for p in (tmp_path / "errors").iterdir()] == ["long.txt"]
