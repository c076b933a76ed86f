"""Property: whatever string JSON can hold (lone surrogates, NUL, controls, bidi marks) in
a failing rollout's id, error, messages, metrics and info, every writer of a run writes
it: the results file reads back, the printed lines are one per row and encode as UTF-8,
the Markdown summary encodes, the JUnit report parses, the kept full error text is
written, and the viewer's pages and export render as UTF-8."""

from __future__ import annotations

import asyncio
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from osmo_run import ErrorCategory, ExecutionRequest, ExecutionResult, RolloutSample, RolloutStatus
from osmo_run.run.executing.display import PlainDisplay
from osmo_run.run.executing.runner import Runner, WorkItem
from osmo_run.run.reading.dataset import DatasetRow
from osmo_run.run.reporting.ci_reports import markdown_summary, write_junit
from osmo_run.run.writing.output import OutputWriter
from osmo_run.run.writing.runfiles import iter_records
from osmo_run.testing import FakeBackend
from osmo_run.view.catalog import Catalog
from osmo_run.view.export import export_html

ANY_TEXT = st.text(st.characters(codec=None, categories=None), max_size=30)
"""Any code point, surrogates included (``codec=None``: not only what UTF-8 encodes)."""


def _respond(request: ExecutionRequest) -> ExecutionResult:
    text = str(request.metadata["text"])
    if request.metadata["fail"]:
        return ExecutionResult.failure(
            request.id, ErrorCategory.AGENT_ERROR, f"refused {text}\nsecond {text}"
        )
    sample = RolloutSample(
        messages=[*request.prompt, {"role": "assistant", "content": text}],
        metrics={text: 1.0},
        reward=0.5,
    )
    return ExecutionResult(request.id, RolloutStatus.SUCCESS, sample=sample, info={text: text})


def _run(directory: Path, row_id: str, text: str, fail: bool) -> tuple[Path, str]:
    request = ExecutionRequest(
        id=row_id,
        prompt=[{"role": "user", "content": text}],
        metadata={"text": text, "fail": fail},
        agent_timeout_sec=5.0,
    )
    item = WorkItem(DatasetRow(0, 1, row_id, request), 0, request)
    printed = io.BytesIO()
    stream = io.TextIOWrapper(printed, encoding="utf-8", errors="strict", write_through=True)
    results = directory / "results.jsonl"

    async def main() -> Any:
        with OutputWriter(results) as writer:
            return await Runner(FakeBackend(_respond), writer, PlainDisplay(stream)).run([item])

    summary = asyncio.run(main())
    (directory / "results.summary.json").write_text(json.dumps(summary.to_dict()))
    return results, printed.getvalue().decode("utf-8")


@settings(max_examples=40, deadline=None)
@given(row_id=ANY_TEXT.filter(lambda s: s.strip() != ""), text=ANY_TEXT, fail=st.booleans())
@example(row_id="r\ud83d", text="broken emoji \ud83d here\x00\u202e", fail=True)
def test_every_writer_writes_any_string(
    tmp_path_factory: Any, row_id: str, text: str, fail: bool
) -> None:
    directory: Path = tmp_path_factory.mktemp("run")
    results, printed = _run(directory, row_id, text, fail)
    (record,) = list(iter_records(results))
    assert record["row_id"] == row_id
    assert record["status"] == ("failure" if fail else "success")
    if fail:
        assert record["error_message"].startswith("refused")
        assert len([line for line in printed.splitlines() if "FAILURE" in line]) == 1
        assert Path(record["backend"]["error_log"]).read_text(encoding="utf-8")
    from osmo_run.run.reporting.summary import SummaryBuilder

    builder = SummaryBuilder()
    builder.add_record(record)
    markdown = markdown_summary(results, builder.build(output=str(results)), [], text)
    markdown.encode("utf-8")
    write_junit(results, directory / "junit.xml", text or "suite", 1.0)
    ET.parse(directory / "junit.xml")
    written = export_html(Catalog.open([directory]).runs.popitem()[1], directory / "r.html", None)
    assert written.size > 0
