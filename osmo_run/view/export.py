"""One run as one self-contained HTML file: for CI artifacts and for mailing to a colleague.

The file holds the summary and its charts (inline SVG), the rows table with its filters,
sort and paging (done by the inlined page script), and transcripts; the stylesheet and the
script are inline, and its Content-Security-Policy allows exactly those two (by hash) and
``data:`` images, so opening it makes no network request and no markup from a row can run.

A large run keeps the file readable: the table lists every row up to
:data:`TABLE_LIMIT` (beyond that: every failed row plus a random sample of the others),
and transcripts are exported for every failed rollout plus a random sample of ``sample``
others (seeded, so the same run exports the same rows). ``sample=None`` exports all.
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

from osmo_run.errors import OutputError
from osmo_run.run.writing.aliases import check_no_aliases, run_files
from osmo_run.view.captured import without_ids
from osmo_run.view.catalog import RunEntry
from osmo_run.view.index import cache_dir
from osmo_run.view.pages import RowDetail, RunView
from osmo_run.view.query import RowQuery
from osmo_run.view.render import render, static_text

TABLE_LIMIT = 20_000
SEARCH_CHARS = 600
"""Characters of each row's ids, messages and errors the export's text filter searches."""
SEED = 0


class ExportLinks:
    """Links inside the one file: rows to their transcript sections, chart bars to filters."""

    def __init__(self, exported: set[int]) -> None:
        self.exported = exported

    def run(self, key: str, query: RowQuery | None = None, **changes: object) -> str:
        params = (query or RowQuery()).params(**changes)
        return "#rows?" + urlencode(params)

    def row(self, key: str, position: int, query: RowQuery | None = None) -> str:
        return f"#row-{position}" if position in self.exported else "#no-transcript"

    def file(self, key: str, relative: str) -> str | None:
        return None  # files stay in the run directory; the export lists them

    def find(self, key: str, row_id: str, sample: int) -> str:
        return "#rows"


@dataclass
class Written:
    size: int
    description: str


def _csp_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode() + "'"


def choose(
    failed: list[int], others: list[int], limit: int | None, seed: int = SEED
) -> tuple[list[int], str]:
    """Every failed position plus ``limit`` of the others at random (all with ``None``),
    in file order, and a sentence saying which."""
    if limit is None or len(others) <= limit:
        chosen, which = others, f"all {len(others):,} others"
    else:
        chosen = random.Random(seed).sample(others, limit)
        which = (
            f"{limit:,} of {len(others):,} others (a random sample, seed {seed}; "
            "--export-all for every one)"
        )
    return sorted([*failed, *chosen]), f"all {len(failed):,} failed and {which}"


def export_html(entry: RunEntry, target: Path, sample: int | None) -> Written:
    """Write ``entry`` to ``target``; raise :class:`OutputError` when it cannot be written
    or is one of the run's own files (before anything is written)."""
    check_no_aliases(run_files(entry.paths, "the run exported"), [("--export", target)])
    view = RunView(entry, cache_dir())
    with view.lock:
        view.refresh()
        index = view.index
        statuses = index.cols.status
        failed = [i for i in range(index.count) if statuses[i] != 0]
        others = [i for i in range(index.count) if statuses[i] == 0]
        if sample is None or index.count <= TABLE_LIMIT:
            table, table_note = list(range(index.count)), f"all {index.count:,} rollouts"
        else:
            table, which = choose(failed, others, max(TABLE_LIMIT - len(failed), 0))
            table_note = f"{len(table):,} of {index.count:,} rollouts: {which}"
        transcripts, transcript_note = choose(failed, others, sample)
        exported = set(transcripts)
        links = ExportLinks(exported)
        overview = view.overview(links)
        lines = view.lines(table, with_search_text=True)
        for line in lines:
            line.search_text = line.search_text[:SEARCH_CHARS]
        details: list[RowDetail] = [view.detail_of(p, r) for p, r in index.read_many(transcripts)]
        for detail in details:  # one file for many rows: the counts, not every token id
            detail.captured = [without_ids(turn) for turn in detail.captured]
    css, js = static_text("style.css"), static_text("app.js")
    policy = (
        f"default-src 'none'; style-src {_csp_hash(css)}; script-src {_csp_hash(js)}; "
        "img-src data:; form-action 'none'; base-uri 'none'"
    )
    html = render(
        "export.html",
        o=overview,
        key=entry.key,
        query=RowQuery(),
        lines=lines,
        details=details,
        links=links,
        css=css,
        js=js,
        policy=policy,
        table_note=table_note,
        transcript_note=f"transcripts of {transcript_note}",
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    data = html.encode("utf-8")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write the report: {exc.strerror or exc}") from None
    return Written(len(data), f"{table_note} in the table; transcripts of {transcript_note}")
