"""What each page shows, as plain data for the templates; shared by the server and the
export so both show the same facts the same way.

:class:`RunView` owns one run's index (and the lock serializing access to it) and keeps
what is derived from it (the summary, the reward histogram, the duration percentiles)
until the index changes. URLs come from a :class:`Links`: the server's point at routes,
the export's at anchors inside the one file.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from osmo_run.run.executing.finish import exit_code_for
from osmo_run.run.reading.columns import column_map
from osmo_run.run.reporting.paired import RegressionVerdict, regression_gate
from osmo_run.run.reporting.report import Comparison, LoadedRun, compare, error_change
from osmo_run.run.reporting.summary import RunSummary
from osmo_run.run.writing.records import OutputRecord, record_safe_name
from osmo_run.sdk.context import CALLS_BEFORE_FAILURE_KEY
from osmo_run.sdk.types import BackendDetails
from osmo_run.view import charts
from osmo_run.view import derived as derived_cache
from osmo_run.view.captured import CapturedTurn, TurnsFile, captured_turns
from osmo_run.view.catalog import RunEntry
from osmo_run.view.derived import Derived
from osmo_run.view.files import FileEntry, list_files, relative_inside, text_preview
from osmo_run.view.index import PHASES, STATUSES, BadLine, RowIndex
from osmo_run.view.labels import DatasetLines, DatasetRowView
from osmo_run.view.query import Neighbors, QueryCache, RowPage, RowQuery, neighbors, run_query
from osmo_run.view.served import ServedFiles
from osmo_run.view.transcript import Turn, pretty_json, preview, transcript
from osmo_run.view.why import passing, why_text

VERDICTS = {
    0: "passed: every rollout succeeded",
    1: "failed: a rollout failed",
    130: "interrupted",
}


class Links(Protocol):
    def run(self, key: str, query: RowQuery | None = None, **changes: object) -> str: ...
    def row(self, key: str, position: int, query: RowQuery | None = None) -> str: ...
    def file(self, key: str, relative: str) -> str | None: ...
    def find(self, key: str, row_id: str, sample: int) -> str: ...


@dataclass
class Overview:
    """The run page's top half: the summary in numbers and in charts."""

    entry: RunEntry
    summary: RunSummary
    count: int
    expected: int | None
    state: str
    verdict: str
    status: charts.BarChart
    categories: charts.BarChart
    rewards: charts.BarChart
    durations: charts.BarChart
    tokens: charts.BarChart
    bad: list[BadLine]
    bad_count: int
    pending: int
    categories_seen: list[str]
    gates: list[dict[str, Any]] = field(default_factory=list)
    not_passing: int = 0
    """Successes rewarded below the pass threshold."""


@dataclass
class RowLine:
    """One line of the rows table."""

    position: int
    line: int
    row_id: str
    rollout_id: str
    sample_index: int
    status: str
    category: str | None
    phase: str | None
    reward: float | None
    seconds: float
    tokens: float | None
    attempt: int
    preview: str
    why: str = ""
    """Why it has its result, in one line (see :mod:`osmo_run.view.why`)."""
    passing: bool | None = None
    """Whether it passed (``None``: a success without a reward)."""
    search_text: str = ""
    """Lower-cased ids and message text (the export filters on it in the browser)."""


@dataclass
class RowDetail:
    """Everything the row page shows about one record."""

    position: int
    line: int
    record: dict[str, Any]
    format_problem: str | None
    turns: list[Turn]
    before_failure: list[Turn]
    """A failed rollout without a sample: the conversation its last model call saw."""
    before_failure_calls: int
    attempts: list[dict[str, Any]]
    metrics: dict[str, Any]
    usage: dict[str, Any] | None
    timings: dict[str, Any]
    info_json: str | None
    backend_json: str | None
    artifacts: list[FileEntry]
    trial_files: list[FileEntry]
    trial_note: str | None
    previews: dict[str, str]
    """Text files' first bytes, by relative path (artifacts and trial logs)."""
    dataset_row: DatasetRowView | None
    dataset_note: str | None
    why: str = ""
    """Why it has its result, in full (the error, the grader's explanation)."""
    full_error: str | None = None
    """The file holding the full error text (``backend.error_log``), relative to the run
    directory, when it is inside it."""
    not_passing: bool = False
    """A success rewarded below the pass threshold."""
    threshold: float = 1.0
    captured: list[CapturedTurn] = field(default_factory=list)
    """The rollout's captured model calls (``llm.capture: tokens``), in call order."""


def _optional(value: float) -> float | None:
    return None if value != value else value


class RunView:
    """One run: its index, kept current, and what the pages derive from it."""

    def __init__(self, entry: RunEntry, cache: Path | None) -> None:
        self.entry = entry
        self.index = RowIndex(entry.paths.results, cache)
        self.lock = threading.Lock()
        self.queries = QueryCache()
        self.ready = threading.Event()
        self._derived: Derived | None = None
        self._derived_key: tuple[int, int] = (-1, -1)
        self._dataset: DatasetLines | None = None
        self.served = ServedFiles(entry.paths)
        self.turns_file = TurnsFile(entry.paths.turns)

    def refresh(self) -> bool:
        """Bring the index up to date with the file (call with :attr:`lock` held)."""
        changed = self.index.refresh()
        self.ready.set()
        return changed

    def derived(self) -> Derived:
        """The summary and chart data of the index as it is (computed once per state of
        the file, and cached on disk for the next start)."""
        key = (self.index.generation, self.index.count)
        if key != self._derived_key or self._derived is None:
            entry = self.entry
            threshold, samples = entry.pass_threshold, entry.samples_per_row
            found = derived_cache.load(self.index, threshold, samples)
            if found is None:
                found = derived_cache.compute(
                    self.index, threshold, samples, str(entry.paths.results)
                )
                derived_cache.save(self.index, threshold, samples, found)
            self._derived, self._derived_key = found, key
        return self._derived

    def served_file(self, relative: str) -> Path | None:
        """The file ``relative`` names when the viewer serves it (see :mod:`.served`), else
        ``None`` (call with :attr:`lock` held, after :meth:`refresh`)."""
        self.served.lookup(self.index, relative)
        return self.served.resolve(relative)

    def summary(self) -> RunSummary:
        return self.derived().summary

    def overview(self, links: Links) -> Overview:
        derived = self.derived()
        summary = derived.summary
        key = self.entry.key
        code = int(exit_code_for(summary))
        not_passing = self.not_passing_count()
        return Overview(
            entry=self.entry,
            summary=summary,
            count=self.index.count,
            expected=self.entry.expected,
            state=self.entry.state(),
            verdict=VERDICTS.get(code, f"exit code {code}"),
            not_passing=not_passing,
            status=charts.status_chart(
                summary,
                lambda s: links.run(key, status=s),
                not_passing=not_passing,
                not_passing_href=links.run(key, passing="no"),
            ),
            categories=charts.category_chart(summary, lambda c: links.run(key, category=c)),
            rewards=charts.reward_chart(
                derived.reward_bins,
                lambda lo, hi: links.run(key, reward_min=lo, reward_max=hi, status="success"),
            ),
            durations=charts.duration_chart(derived.durations),
            tokens=charts.token_chart(summary),
            bad=list(self.index.bad),
            bad_count=self.index.bad_count,
            pending=self.index.pending,
            categories_seen=list(self.index.categories),
            gates=_recorded_gates(self.entry),
        )

    def not_passing_count(self) -> int:
        """Successes rewarded below the pass threshold (wrong answers)."""
        cols, threshold = self.index.cols, self.entry.pass_threshold
        return sum(
            1 for s, r in zip(cols.status, cols.reward, strict=True) if s == 0 and r < threshold
        )

    def neighbors(self, position: int, query: RowQuery) -> Neighbors:
        """Where the row at ``position`` sits in the rows list ``query`` shows (call with
        :attr:`lock` held, after :meth:`refresh`)."""
        return neighbors(
            self.index,
            query,
            position,
            self.queries,
            self.entry.pass_threshold,
            self.failed_prompt_matches,
        )

    def failed_prompt_matches(self, text: str) -> set[int]:
        """Failed rollouts without a sample whose prompt, read back from the run's dataset,
        holds ``text`` (any case): their prompt is in no line of the results file, yet a
        search of prompts must find them (call with :attr:`lock` held)."""
        from osmo_run.view.search import file_mentions, prompt_strings

        manifest = self.entry.manifest
        dataset = manifest.info.get("dataset_path") if manifest else None
        if not isinstance(dataset, str) or not file_mentions(Path(dataset), text):
            return set()  # the common case: no prompt holds it, no record is read
        cols, needle = self.index.cols, text.casefold()
        failed = [i for i in range(self.index.count) if cols.status[i] != 0]
        found: set[int] = set()
        for position, record in self.index.read_many(failed):
            if not isinstance(record, dict) or isinstance(record.get("sample"), dict):
                continue  # its messages, prompt included, are in the results file
            row, _ = self._dataset_row(record)
            if row is not None and any(needle in s.casefold() for s in prompt_strings(row.prompt)):
                found.add(position)
        return found

    def page(self, query: RowQuery) -> tuple[RowPage, list[RowLine]]:
        page = run_query(
            self.index,
            query,
            self.queries,
            self.entry.pass_threshold,
            self.failed_prompt_matches,
        )
        return page, self.lines(page.positions)

    def lines(self, positions: list[int], with_search_text: bool = False) -> list[RowLine]:
        cols, out = self.index.cols, []
        for position, record in self.index.read_many(positions):
            if not isinstance(record, dict):
                continue
            category = cols.category[position]
            phase = cols.phase[position]
            tokens = cols.prompt_tokens[position] + cols.completion_tokens[position]
            out.append(
                RowLine(
                    position=position,
                    line=cols.line[position],
                    row_id=str(record.get("row_id")),
                    rollout_id=str(record.get("rollout_id") or record.get("row_id")),
                    sample_index=cols.sample_index[position],
                    status=STATUSES[cols.status[position]],
                    category=self.index.category_name(category),
                    phase=PHASES[phase] if phase >= 0 else None,
                    reward=_optional(cols.reward[position]),
                    seconds=cols.seconds[position],
                    tokens=_optional(tokens),
                    attempt=cols.attempt[position],
                    preview=preview(record),
                    why=why_text(record),
                    passing=passing(record, self.entry.pass_threshold),
                    search_text=_search_text(record) if with_search_text else "",
                )
            )
        return out

    def detail(self, position: int) -> RowDetail | None:
        """The row page of the record at ``position``; ``None`` when there is none."""
        if not 0 <= position < self.index.count:
            return None
        try:
            record = self.index.read(position)
        except ValueError:
            return None
        return self.detail_of(position, record)

    def detail_of(self, position: int, record: dict[str, Any]) -> RowDetail:
        problem = None
        try:
            OutputRecord.model_validate(record)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "record"
            problem = f"{where}: {first['msg']} (shown as far as it can be read)"
        sample = record.get("sample") if isinstance(record.get("sample"), dict) else {}
        root = self.entry.paths.directory
        self.served.learn(record)
        try:
            name = record_safe_name(record)  # where the runner wrote them: ids are not paths
        except (TypeError, ValueError, OverflowError):
            name = ""
        artifacts = (
            self.served.keep(list_files(root, self.entry.paths.artifacts / name))
            if self.served.allows(f"artifacts/{name}/file")
            else []
        )
        backend = record.get("backend") if isinstance(record.get("backend"), dict) else {}
        trial_files: list[FileEntry] = []
        trial_note = None
        trial_dir = BackendDetails.from_dict(backend).trial_dir
        if trial_dir:
            trial_path = Path(trial_dir)
            if not trial_path.is_absolute():
                trial_path = root / trial_path
            if relative_inside(root, trial_path) is None:
                trial_note = (
                    f"kept trial directory {trial_dir} is outside the run directory "
                    "(or gone): the viewer serves files from inside run directories only"
                )
            else:
                trial_files = self.served.keep(list_files(root, trial_path))
        previews = {}
        for item in [*artifacts, *trial_files][:40]:
            if item.kind == "text":
                text, cut = text_preview(root / item.relative)
                previews[item.relative] = text + (
                    "\n… (cut: open the file for the rest)" if cut else ""
                )
        dataset_row, dataset_note = self._dataset_row(record)
        info = record.get("info")
        before = (
            info.get(CALLS_BEFORE_FAILURE_KEY) if isinstance(info, dict) and not sample else None
        )
        before = before if isinstance(before, dict) else None
        usage = record.get("usage") if isinstance(record.get("usage"), dict) else None
        rollout_id = record.get("rollout_id")
        captured = self.turns_file.turns(rollout_id) if isinstance(rollout_id, str) else None
        return RowDetail(
            position=position,
            line=self.index.cols.line[position] if position < self.index.count else 0,
            record=record,
            format_problem=problem,
            turns=transcript(sample.get("messages") if sample else None),
            before_failure=transcript(before.get("messages")) if before else [],
            before_failure_calls=_count(before.get("model_calls")) if before else 0,
            attempts=[a for a in record.get("attempts") or [] if isinstance(a, dict)],
            metrics=dict(sample.get("metrics") or {}) if sample else {},
            usage=usage,
            timings=dict(record.get("timings") or {}),
            info_json=pretty_json(record["info"]) if record.get("info") else None,
            backend_json=pretty_json(backend) if backend else None,
            artifacts=artifacts,
            trial_files=trial_files,
            trial_note=trial_note,
            previews=previews,
            dataset_row=dataset_row,
            dataset_note=dataset_note,
            why=why_text(record, full=True),
            full_error=self._full_error(backend),
            not_passing=record.get("status") == "success"
            and passing(record, self.entry.pass_threshold) is False,
            threshold=self.entry.pass_threshold,
            captured=captured_turns(captured) if captured else [],
        )

    def _full_error(self, backend: Any) -> str | None:
        """Where the row's full error text is (``backend.error_log``), relative to the run
        directory; ``None`` without one or outside it."""
        log = backend.get("error_log") if isinstance(backend, dict) else None
        if not isinstance(log, str) or not log:
            return None
        root = self.entry.paths.directory
        path = Path(log) if Path(log).is_absolute() else root / log
        if not path.is_file():
            return None
        relative = relative_inside(root, path)
        if relative is None or not self.served.allows(relative):
            return None
        return relative

    def _dataset_row(self, record: dict[str, Any]) -> tuple[DatasetRowView | None, str | None]:
        manifest = self.entry.manifest
        path = manifest.info.get("dataset_path") if manifest else None
        if not isinstance(path, str):
            return None, "no dataset recorded in the run's manifest: the label is not shown"
        fmt = manifest.defining.get("dataset_format", "jsonl") if manifest else "jsonl"
        if fmt != "jsonl":  # rows are found by line; a CSV or Parquet row by reading up to it
            return None, f"the run's dataset is {fmt}: its label is not shown here"
        if self._dataset is None:
            columns = (manifest.defining.get("dataset_columns") if manifest else None) or {}
            self._dataset = DatasetLines(
                Path(path), self.entry.dataset_sha256, column_map(None, **columns)
            )
        line = record.get("line")
        row = self._dataset.row(line) if isinstance(line, int) else None
        if row is None:
            return None, self._dataset.problem or f"line {line} of {path} is not a dataset row"
        return row, None

    def find(self, row_id: str, sample: int) -> int | None:
        """The position of the record of ``row_id`` (sample ``sample``), by a byte search."""
        from osmo_run.view.search import matching_positions

        for position in sorted(matching_positions(self.index, row_id)):
            record = self.index.read(position)
            if (
                str(record.get("row_id")) == row_id
                and int(record.get("sample_index") or 0) == sample
            ):
                return position
        return None


def _search_text(record: dict[str, Any]) -> str:
    from osmo_run.view.search import searchable_strings

    text = " ".join(searchable_strings(record)).casefold()
    return text[:4000]


def _recorded_gates(entry: RunEntry) -> list[dict[str, Any]]:
    """Gates saved with the run, if a version of osmo-run records them in the manifest."""
    gates = entry.manifest.info.get("gates") if entry.manifest else None
    return [g for g in gates if isinstance(g, dict)] if isinstance(gates, list) else []


@dataclass
class CompareView:
    a: RunEntry
    b: RunEntry
    diff: Comparison
    largest: list[tuple[str, float | None, float | None, float]]
    histogram: charts.BarChart
    threshold: float
    verdict: RegressionVerdict | None = None
    """The regression gate's decision on pass rate at 0.05 (what ``osmo-run report A B
    --fail-on-regression`` would say with its defaults)."""


def compare_runs(a: RunEntry, b: RunEntry, links: Links) -> CompareView:
    """``osmo-run report A B``'s facts (:func:`osmo_run.run.reporting.report.compare`), with
    links."""
    threshold = a.pass_threshold
    diff = compare(LoadedRun(a.paths, a.manifest), LoadedRun(b.paths, b.manifest), threshold)
    largest = sorted(
        (
            (n, ra, rb, delta)
            for n, ra, rb in diff.reward_deltas
            if (delta := (rb or 0.0) - (ra or 0.0)) != 0.0
        ),
        key=lambda item: abs(item[3]),
        reverse=True,
    )[:100]
    chart = charts.BarChart("Error categories, A then B", empty="no failed rollouts in either")
    for name in sorted(set(diff.categories_a) | set(diff.categories_b)):
        before, after = diff.categories_a[name], diff.categories_b[name]
        chart.bars.append(charts.Bar(f"{name} · A", before, f"{before:,}", None, "neutral"))
        chart.bars.append(
            charts.Bar(
                f"{name} · B",
                after,
                f"{after:,} ({after - before:+d})"
                if diff.rollouts[0] == diff.rollouts[1]
                else error_change(diff, name).split(" -> ")[1],
                links.run(b.key, category=name),
                "bad",
            )
        )
    verdict = (
        regression_gate(diff.significance.passing, 0.05, 0.0, diff.only_a)
        if diff.significance is not None
        else None
    )
    return CompareView(a, b, diff, largest, chart, threshold, verdict)


def row_link(links: Links, key: str, row_id: str) -> str:
    """The link to the row ``row_id`` of a comparison (:func:`compare` names rows by their
    ids, all samples together): its first sample. An id is data: ``q~3`` is the row
    ``q~3``, not sample 3 of ``q``."""
    return links.find(key, row_id, 0)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
