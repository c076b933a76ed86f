"""Reports for CI systems, written from a run's results file: JUnit XML and Markdown.

JUnit: one test case per rollout. A rollout graded below the pass threshold is a
*failure*; a rollout that failed (timeout, exception, infrastructure) is an *error* with
its category and message; a rollout that was not graded is *skipped* with the reason.
Markdown: the summary, the histogram and the failed rows, for ``GITHUB_STEP_SUMMARY``.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from osmo_run.run.reporting.gates import GateFailure
from osmo_run.run.reporting.summary import RunSummary
from osmo_run.run.writing.runfiles import iter_records
from osmo_run.run.writing.text import markdown_text

_MAX_MARKDOWN_ROWS = 50

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters XML 1.0 cannot hold, escaped or not (ANSI colour codes, NUL, lone surrogates)."""


def _xml(text: str) -> str:
    """``text`` with the characters XML forbids written as ``\\xNN`` / ``\\uNNNN``."""
    return _NOT_XML.sub(lambda m: ascii(m.group())[1:-1], text)


def _name(record: dict[str, Any]) -> str:
    sample = int(record.get("sample_index", 0))
    return str(record["row_id"]) + (f" (sample {sample})" if sample else "")


def junit_xml(
    records: Iterable[dict[str, Any]], suite: str, threshold: float
) -> ET.ElementTree[ET.Element]:
    """The JUnit document for ``records`` in one ``<testsuite>`` named ``suite``."""
    suite = _xml(suite)
    root = ET.Element("testsuites", name="osmo-run")
    suite_element = ET.SubElement(root, "testsuite", name=suite)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for record in records:
        seconds = float((record.get("timings") or {}).get("total_sec") or 0.0)
        total_time += seconds
        case = ET.SubElement(
            suite_element,
            "testcase",
            name=_xml(_name(record)),
            classname=f"osmo-run.{suite}",
            time=f"{seconds:.3f}",
        )
        counts["tests"] += 1
        status, reward = record.get("status"), record.get("reward")
        if status != "success":
            category = str(record.get("error_category") or status)
            phase = record.get("error_phase") or "-"
            error = ET.SubElement(
                case, "error", type=_xml(category), message=_xml(f"{category} ({phase})")
            )
            error.text = _xml(str(record.get("error_message") or ""))
            counts["errors"] += 1
        elif reward is None:
            reason = str(record.get("grader_skipped") or "not graded")
            ET.SubElement(case, "skipped", message=_xml(reason))
            counts["skipped"] += 1
        elif reward < threshold:
            failure = ET.SubElement(
                case,
                "failure",
                type="below_threshold",
                message=f"reward {reward:g} below the pass threshold {threshold:g}",
            )
            failure.text = f"reward {reward:g}"
            counts["failures"] += 1
    for element in (root, suite_element):
        for key, value in counts.items():
            element.set(key, str(value))
        element.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(results: Path, target: Path, suite: str, threshold: float) -> None:
    """Write the JUnit XML of the results file ``results`` to ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tree = junit_xml(iter_records(results), suite, threshold)
    tree.write(target, encoding="utf-8", xml_declaration=True)


def _cell(text: object) -> str:
    return markdown_text(str(text), limit=200)


def markdown_summary(
    results: Path, summary: RunSummary, failures: list[GateFailure], title: str
) -> str:
    """A Markdown report: verdict, counts, rewards, histogram and the failed rows."""
    trip = summary.breaker
    spent = summary.budget
    stopped = trip is not None or spent is not None
    verdict = "❌ failed" if failures or stopped else "✅ passed"
    lines = [f"## osmo-run: {markdown_text(title)} — {verdict}", ""]
    lines += [f"- {failure.line()}" for failure in failures]
    if trip is not None:
        lines.append(f"- {markdown_text(trip.line())}")
    if spent is not None:
        lines.append(f"- {markdown_text(spent.line())}")
    if summary.not_run:
        stopper = "the breaker" if trip is not None else "the budget" if spent else "fail-fast"
        why = f"{stopper} stopped the run" if summary.stopped_early else "--retry-errors alone"
        lines.append(
            f"- {summary.not_run} rollouts not run ({why}); the gates count them as failures"
        )
    if failures or stopped or summary.not_run:
        lines.append("")

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.4g}"

    lines += [
        "| rollouts | success | failure | cancelled | graded | mean reward (all) | "
        "mean reward (graded) | pass rate |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {summary.total} | {summary.by_status.get('success', 0)} | "
        f"{summary.by_status.get('failure', 0)} | {summary.by_status.get('cancelled', 0)} | "
        f"{summary.graded} | {fmt(summary.mean_reward_all)} | "
        f"{fmt(summary.mean_reward_graded)} | {fmt(summary.pass_rate)} |",
        "",
    ]
    if summary.error_categories:
        lines += ["| error category | rollouts |", "|---|---:|"]
        lines += [f"| {name} | {count} |" for name, count in summary.error_categories.items()]
        lines.append("")
    failed = [r for r in iter_records(results) if r.get("status") != "success"]
    if failed:
        lines += ["| row | category | phase | message |", "|---|---|---|---|"]
        for record in failed[:_MAX_MARKDOWN_ROWS]:
            lines.append(
                f"| {_cell(_name(record))} | {_cell(record.get('error_category'))} | "
                f"{_cell(record.get('error_phase'))} | {_cell(record.get('error_message'))} |"
            )
        if len(failed) > _MAX_MARKDOWN_ROWS:
            lines.append(f"\n…and {len(failed) - _MAX_MARKDOWN_ROWS} more failed rows.")
        lines.append("")
    lines.append(f"Results: `{results}`")
    return "\n".join(lines) + "\n"


def append_step_summary(markdown: str) -> Path | None:
    """Append to ``$GITHUB_STEP_SUMMARY`` when it is set; return the file written."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with open(path, "a", encoding="utf-8", errors="backslashreplace") as handle:
        handle.write(markdown)
    return path
