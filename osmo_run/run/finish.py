"""The end of a run: its verdict (gates and exit code), the saved summary, what is printed,
and the reports CI systems read (JUnit, Markdown, ``--json``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rich.console import Console

from osmo_run.errors import ExitCode
from osmo_run.run.ci_reports import append_step_summary, markdown_summary, write_junit
from osmo_run.run.display import render_summary
from osmo_run.run.gates import GateFailure, Gates, evaluate
from osmo_run.run.plan import RunPlan
from osmo_run.run.runfiles import RunPaths
from osmo_run.run.summary import RunSummary


def exit_code_for(summary: RunSummary, failures: list[GateFailure] | None = None) -> ExitCode:
    """The exit code of a finished run given the gates it failed (see :class:`ExitCode`).

    ``failures`` defaults to the verdict without gates (any failed rollout fails).
    """
    if summary.interrupted:
        return ExitCode.INTERRUPTED
    if failures is None:
        failures = evaluate(summary, Gates())
    if not failures:
        return ExitCode.OK
    if any(f.kind == "budget" for f in failures):
        return ExitCode.ERROR_BUDGET_EXCEEDED
    return ExitCode.ROLLOUTS_FAILED


def write_summary(paths: RunPaths, summary: RunSummary) -> None:
    """Save ``summary`` as the run's summary JSON, atomically."""
    tmp = paths.summary.with_name(paths.summary.name + ".tmp")
    tmp.write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(paths.summary)


def finish_run(plan: RunPlan, summary: RunSummary, console: Console, title: str) -> ExitCode:
    """Judge ``summary`` by the plan's gates, save and print it, write the CI reports the
    settings ask for; return the exit code. ``title`` heads the Markdown report."""
    settings = plan.settings
    summary.output = str(plan.paths.results)
    failures = evaluate(summary, settings.gates)
    code = exit_code_for(summary, failures)
    write_summary(plan.paths, summary)
    console.print(render_summary(summary))
    for failure in failures if settings.gates.given else []:
        console.print(failure.line(), style="red", markup=False, soft_wrap=True)
    _write_ci_reports(plan, summary, failures, title)
    if settings.json_summary:
        verdict = {
            "exit_code": int(code),
            "passed": not failures and not summary.interrupted,
            "gate_failures": [vars(f) for f in failures],
            "run_dir": str(plan.paths.directory),
            "summary": summary.to_dict(),
        }
        sys.stdout.write(json.dumps(verdict) + "\n")
        sys.stdout.flush()
    return code


def _write_ci_reports(
    plan: RunPlan, summary: RunSummary, failures: list[GateFailure], title: str
) -> None:
    settings, results = plan.settings, plan.paths.results
    if settings.junit_xml is not None:
        write_junit(results, settings.junit_xml, settings.dataset.stem, plan.spec.pass_threshold)
    if settings.summary_md is not None or os.environ.get("GITHUB_STEP_SUMMARY"):
        markdown = markdown_summary(results, summary, failures, title)
        if settings.summary_md is not None:
            _write_text(settings.summary_md, markdown)
        append_step_summary(markdown)


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
