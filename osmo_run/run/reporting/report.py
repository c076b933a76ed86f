"""Reports from a run's files alone: one run's summary, shards merged, two runs compared.

Works on finished, partial and crashed runs: a torn last line is skipped, and a run with
fewer records than its manifest expects is reported as partial.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from osmo_run.errors import InputError
from osmo_run.run.configuring.spec import parse_shard
from osmo_run.run.reading.rows import shown
from osmo_run.run.reporting.paired import RegressionVerdict, Significance, paired_tests
from osmo_run.run.reporting.summary import RunSummary, SummaryBuilder
from osmo_run.run.reporting.summary_text import render_summary
from osmo_run.run.writing.manifest import Manifest, read_manifest
from osmo_run.run.writing.runfiles import BadLine, RunPaths, first_line_is_record, iter_records
from osmo_run.run.writing.text import one_line


@dataclass
class LoadedRun:
    paths: RunPaths
    manifest: Manifest | None

    bad_lines: list[BadLine] = field(default_factory=list)
    """Lines of the results file that are not records, found while reading it."""

    @classmethod
    def load(cls, target: Path) -> LoadedRun:
        """The run at ``target``. Raises :class:`InputError` when there is none, or when
        ``target`` is a file with no manifest beside it whose first line is not a result
        record (a dataset, say)."""
        paths = RunPaths.locate(target)
        manifest = read_manifest(paths.manifest)
        if manifest is None and not first_line_is_record(paths.results):
            raise InputError(
                f"{paths.results}: not an osmo-run results file (line 1 is not a result "
                f"record, and there is no {paths.manifest.name} beside it); give a run "
                "directory or its results file"
            )
        return cls(paths, manifest)

    @property
    def samples_per_row(self) -> int:
        defining = self.manifest.defining if self.manifest else {}
        return int(defining.get("samples_per_row", 1))

    @property
    def expected(self) -> int | None:
        """Rollouts the run was set to produce, from its manifest."""
        if self.manifest is None:
            return None
        defining = self.manifest.defining
        return int(defining.get("rows", 0)) * int(defining.get("samples_per_row", 1))

    def builder(self) -> SummaryBuilder:
        info = self.manifest.info if self.manifest else {}
        defining = self.manifest.defining if self.manifest else {}
        return SummaryBuilder(
            float(info.get("pass_threshold", 1.0)), int(defining.get("samples_per_row", 1))
        )


def summarize(runs: list[LoadedRun]) -> tuple[RunSummary, int, int | None]:
    """The summary of ``runs`` taken together (shards of one run), the number of records
    read, and the number expected (``None`` when a manifest is missing).

    Raises :class:`InputError` when two of ``runs`` hold a rollout of one row id: shards
    of a file with duplicate ids (each shard once checked only its own rows), whose merge
    would count two rows as one.
    """
    builder = runs[0].builder()
    count = 0
    expected: int | None = 0
    holder: dict[tuple[str, str], int] = {}  # (row id, sample) -> the run holding it
    for index, run in enumerate(runs):
        run.bad_lines.clear()
        for record in iter_records(run.paths.results, run.bad_lines):
            if len(runs) > 1:
                _check_not_in_another(runs, holder, index, record)
            builder.add_record(record)
            count += 1
        expected = None if expected is None or run.expected is None else expected + run.expected
    summary = builder.build(output=", ".join(str(run.paths.results) for run in runs))
    return summary, count, expected


def _check_not_in_another(
    runs: list[LoadedRun], holder: dict[tuple[str, str], int], index: int, record: dict[str, Any]
) -> None:
    """Remember that ``runs[index]`` holds ``record``'s rollout; raise :class:`InputError`
    when another run holds it already. (Keys as text: a hand-edited ``sample_index`` is
    compared, not converted.)"""
    key = (str(record.get("row_id")), str(record.get("sample_index", 0)))
    other = holder.setdefault(key, index)
    if other != index:
        raise InputError(
            f"{runs[other].paths.results} and {runs[index].paths.results} both hold row "
            f"{shown(key[0])}: they are not shards of one run of unique ids; give the "
            "dataset's rows unique ids and run the shards again"
        )


def check_shards(runs: list[LoadedRun]) -> list[str]:
    """Raise :class:`InputError` unless ``runs`` are distinct shards of one run; return the
    shards of that run not among them (``K/N``)."""
    manifests = [run.manifest for run in runs]
    if any(m is None for m in manifests):
        raise InputError("merging runs needs their manifests; one of them has none")
    defining = [dict(m.defining) for m in manifests if m is not None]
    shards = [d.pop("shard", None) for d in defining]
    for d in defining:
        d.pop("rows", None)
        d.pop("regrade_of", None)  # each shard's own run id: regraded shards are one run too
    if any(s is None for s in shards):
        raise InputError("these runs are not shards (--shard K/N) of one run")
    if any(d != defining[0] for d in defining[1:]):
        raise InputError("these shard runs differ in what defines their results; not one run")
    parsed = [parse_shard(str(s)) for s in shards]
    if len({n for _, n in parsed}) != 1 or len({k for k, _ in parsed}) != len(parsed):
        raise InputError(f"shards {', '.join(map(str, shards))} are not distinct shards of one N")
    n = parsed[0][1]
    return [f"{k}/{n}" for k in range(1, n + 1) if (k, n) not in parsed]


def _bad_lines_text(run: LoadedRun, shown: int = 10, of: str = "summary") -> str:
    listed = ", ".join(f"{b.number} ({b.reason})" for b in run.bad_lines[:shown])
    more = f" and {len(run.bad_lines) - shown} more" if len(run.bad_lines) > shown else ""
    return f"unreadable lines in {run.paths.results}, left out of this {of}: {listed}{more}"


def render_report(
    summary: RunSummary,
    count: int,
    expected: int | None,
    missing_shards: list[str] | None = None,
    runs: list[LoadedRun] | None = None,
) -> RenderableType:
    """The summary of ``runs`` (read by :func:`summarize`), with what is missing from it:
    shards, unreadable lines (by number), rollouts not recorded."""
    parts: list[RenderableType] = [render_summary(summary)]
    damaged = [run for run in runs or [] if run.bad_lines]
    for run in damaged:
        parts.append(Text(_bad_lines_text(run), style="red"))
    if missing_shards:
        parts.append(
            Text(
                f"missing shards: {', '.join(missing_shards)}; this summary leaves their rows out",
                style="yellow",
            )
        )
    if expected is not None and count < expected:
        advice = (
            "remove the unreadable lines, then `--resume` runs the rest"
            if damaged
            else "`--resume` runs the rest"
        )
        parts.append(
            Text(f"partial run: {count} of {expected} rollouts recorded; {advice}", style="yellow")
        )
    return Group(*parts)


@dataclass
class RowOutcome:
    """What one run did with one row, over all its samples."""

    samples: int = 0
    reward_sum: float = 0.0
    """Rewards summed, a rollout without one counted as 0."""
    passes: int = 0
    reward: float | None = None
    """The reward of the row's one sample (``None``: not rewarded)."""

    def add(self, record: dict[str, Any], threshold: float) -> None:
        reward = record.get("reward") if record.get("status") == "success" else None
        self.samples += 1
        self.reward = reward if self.samples == 1 else None
        self.reward_sum += reward or 0.0
        self.passes += reward is not None and reward >= threshold

    @property
    def mean(self) -> float:
        return self.reward_sum / self.samples if self.samples else 0.0

    @property
    def passed(self) -> bool:
        """At least half the row's samples passed (with one sample: it passed)."""
        return self.samples > 0 and 2 * self.passes >= self.samples

    def shown(self) -> float | None:
        """The reward shown for the row: its sample's, or the mean over its samples."""
        return self.reward if self.samples == 1 else self.mean


@dataclass
class Comparison:
    """How run B differs from run A, row by row, each row over all its samples."""

    only_a: int = 0
    only_b: int = 0
    common: int = 0
    newly_passing: list[str] = field(default_factory=list)
    newly_failing: list[str] = field(default_factory=list)
    reward_deltas: list[tuple[str, float | None, float | None]] = field(default_factory=list)
    categories_a: Counter[str] = field(default_factory=Counter)
    categories_b: Counter[str] = field(default_factory=Counter)
    mean_delta: float | None = None
    samples: tuple[int, int] = (1, 1)
    """Samples per row of A and of B (from their manifests)."""
    rollouts: tuple[int, int] = (0, 0)
    """Rollouts read from A and from B (error counts are compared as rates when they differ)."""
    significance: Significance | None = None
    """The paired tests over the rows in both (see :mod:`osmo_run.run.reporting.paired`)."""


def _outcomes(run: LoadedRun, threshold: float, categories: Counter[str]) -> dict[str, RowOutcome]:
    """Each row's outcome in ``run``; counts its error categories into ``categories``."""
    rows: dict[str, RowOutcome] = {}
    run.bad_lines.clear()
    for record in iter_records(run.paths.results, run.bad_lines):
        if record.get("error_category"):
            categories[str(record["error_category"])] += 1
        rows.setdefault(str(record["row_id"]), RowOutcome()).add(record, threshold)
    return rows


def compare(a: LoadedRun, b: LoadedRun, threshold: float = 1.0) -> Comparison:
    """Rows that flipped between pass and fail, reward changes, and the histogram change.
    Each row is compared over all its samples, so runs with different ``--samples`` are
    compared fairly (pairing sample 0 with sample 0 would ignore the rest)."""
    result = Comparison(samples=(a.samples_per_row, b.samples_per_row))
    first = _outcomes(a, threshold, result.categories_a)
    second = _outcomes(b, threshold, result.categories_b)
    delta_sum = 0.0
    passed: list[tuple[bool, bool]] = []
    rewards: list[tuple[float, float]] = []
    for name, after in second.items():
        before = first.get(name)
        if before is None:
            result.only_b += 1
            continue
        result.common += 1
        if after.passed and not before.passed:
            result.newly_passing.append(name)
        elif before.passed and not after.passed:
            result.newly_failing.append(name)
        # a row's mean (no reward = 0) is what changed; a failure in A (no reward) and a
        # 0.0 mean over B's samples are the same result, not a change
        if before.mean != after.mean:
            result.reward_deltas.append((name, before.shown(), after.shown()))
        delta_sum += after.mean - before.mean
        passed.append((before.passed, after.passed))
        rewards.append((before.mean, after.mean))
    result.only_a = sum(1 for name in first if name not in second)
    result.mean_delta = delta_sum / result.common if result.common else None
    result.rollouts = (
        sum(o.samples for o in first.values()),
        sum(o.samples for o in second.values()),
    )
    result.significance = paired_tests(passed, rewards)
    return result


def error_change(diff: Comparison, name: str) -> str:
    """How error category ``name`` changed from A to B: counts when both runs have as many
    rollouts, else rates (2 of 16 -> 6 of 48 is no change)."""
    before, after = diff.categories_a[name], diff.categories_b[name]
    total_a, total_b = diff.rollouts
    if total_a == total_b or not total_a or not total_b:
        return f"{before} -> {after} ({after - before:+d})"
    rate_a, rate_b = before / total_a, after / total_b
    return (
        f"{before} of {total_a} ({rate_a:.1%}) -> {after} of {total_b} ({rate_b:.1%}) "
        f"({(rate_b - rate_a) * 100:+.1f} points)"
    )


def render_comparison(a: LoadedRun, b: LoadedRun, diff: Comparison) -> RenderableType:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("A", str(a.paths.results))
    table.add_row("B", str(b.paths.results))
    table.add_row(
        "rows",
        f"{diff.common} in both · {diff.only_a} only in A · {diff.only_b} only in B",
    )
    if diff.samples != (1, 1):
        samples_a, samples_b = diff.samples
        table.add_row(
            "samples",
            f"A has {samples_a} samples per row, B {samples_b}: each row is compared over all "
            "its samples (mean reward, no reward = 0; it passes when at least half its "
            "samples pass)",
        )
    delta = "-" if diff.mean_delta is None else f"{diff.mean_delta:+.3g}"
    table.add_row("reward", f"mean change B - A over common rows: {delta} (no reward = 0)")

    def listing(names: list[str]) -> str:
        shown = ", ".join(one_line(name) for name in names[:20])  # ids are data
        return f"{len(names)}" + (f": {shown}" if names else "") + (" …" if len(names) > 20 else "")

    table.add_row("now passing", Text(listing(diff.newly_passing), style="green"))
    table.add_row("now failing", Text(listing(diff.newly_failing), style="red"))
    biggest = sorted(
        diff.reward_deltas,
        key=lambda item: abs((item[2] or 0.0) - (item[1] or 0.0)),
        reverse=True,
    )[:10]
    if biggest:
        table.add_row(
            "largest changes",
            Text("\n".join(f"{one_line(name)}: {ra} -> {rb}" for name, ra, rb in biggest)),
        )
    names = sorted(set(diff.categories_a) | set(diff.categories_b))
    if names and diff.rollouts[0] != diff.rollouts[1]:
        lines = [f"{name:<18} {error_change(diff, name)}" for name in names]
        table.add_row("errors A -> B", "\n".join(lines))
    elif names:
        lines = [
            f"{name:<18} {diff.categories_a[name]:>6} -> {diff.categories_b[name]:<6} "
            f"({diff.categories_b[name] - diff.categories_a[name]:+d})"
            for name in names
        ]
        table.add_row("errors A -> B", "\n".join(lines))
    else:
        table.add_row("errors A -> B", "none in either")
    if diff.significance is not None and diff.common:
        for result in (diff.significance.passing, diff.significance.reward):
            table.add_row("paired test", result.line())
    damaged = [Text(_bad_lines_text(run, of="comparison"), style="red") for run in (a, b)]
    return Group(
        Text("Run comparison", style="bold underline"),
        table,
        *(text for text, run in zip(damaged, (a, b), strict=True) if run.bad_lines),
    )


def gate_junit(verdict: RegressionVerdict, a: LoadedRun, b: LoadedRun, target: Path) -> None:
    """Write the regression gate as JUnit XML: one test case named after the gate, a
    failure when it failed, its line either way."""
    import xml.etree.ElementTree as ET

    name = f"regression gate: {verdict.result.metric} of B against baseline A"
    root = ET.Element("testsuites", name="osmo-run")
    suite = ET.SubElement(root, "testsuite", name="osmo-run regression gate")
    case = ET.SubElement(suite, "testcase", name=name, classname="osmo-run.regression")
    if verdict.failed:
        failure = ET.SubElement(case, "failure", type="regression", message=verdict.line())
        failure.text = f"{verdict.result.line()}\nA: {a.paths.results}\nB: {b.paths.results}"
    else:
        ET.SubElement(case, "system-out").text = f"{verdict.line()}\n{verdict.result.line()}"
    failures = "1" if verdict.failed else "0"
    for element in (root, suite):
        element.set("tests", "1")
        element.set("failures", failures)
        element.set("errors", "0")
        element.set("skipped", "0")
    ET.indent(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(target, encoding="utf-8", xml_declaration=True)


def gate_markdown(verdict: RegressionVerdict, diff: Comparison, a: LoadedRun, b: LoadedRun) -> str:
    """The regression gate for ``GITHUB_STEP_SUMMARY``: the verdict, both paired tests."""
    from osmo_run.run.writing.text import markdown_text

    mark = "❌ failed" if verdict.failed else "✅ passed"
    lines = [f"## osmo-run regression gate — {mark}", "", f"- {markdown_text(verdict.line())}"]
    if diff.significance is not None:
        for result in (diff.significance.passing, diff.significance.reward):
            lines.append(f"- {markdown_text(result.line())}")
    lines += [
        f"- rows: {diff.common} in both, {diff.only_a} only in A, {diff.only_b} only in B; "
        f"samples per row: A {diff.samples[0]}, B {diff.samples[1]}",
        "",
        f"A (baseline): `{a.paths.results}` · B: `{b.paths.results}`",
        "",
    ]
    return "\n".join(lines)
