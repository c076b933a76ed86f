"""The end of a run: its verdict (gates and exit code), the saved summary, what is printed,
and the reports CI systems read (JUnit, Markdown, ``--json``)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from osmo_run.errors import ExitCode
from osmo_run.run.executing.plan import RunPlan
from osmo_run.run.reporting.ci_reports import append_step_summary, markdown_summary, write_junit
from osmo_run.run.reporting.gates import GateFailure, Gates, evaluate
from osmo_run.run.reporting.summary import RunSummary
from osmo_run.run.reporting.summary_text import render_summary
from osmo_run.run.writing.aliases import check_no_aliases, run_files
from osmo_run.run.writing.output import check_writable
from osmo_run.run.writing.runfiles import RunPaths
from osmo_run.run.writing.text import one_line


def exit_code_for(summary: RunSummary, failures: list[GateFailure] | None = None) -> ExitCode:
    """The exit code of a finished run given the gates it failed (see :class:`ExitCode`).

    ``failures`` defaults to the verdict without gates (any failed rollout fails). A run
    the breaker stopped is :attr:`ExitCode.SYSTEMIC_FAILURE` whatever the gates say: what
    it ran says nothing about the rows it did not start; so is one the budget stopped
    :attr:`ExitCode.BUDGET_SPENT`.
    """
    if summary.interrupted:
        return ExitCode.INTERRUPTED
    if summary.breaker is not None:
        return ExitCode.SYSTEMIC_FAILURE
    if summary.budget is not None:
        return ExitCode.BUDGET_SPENT
    if failures is None:
        failures = evaluate(summary, Gates())
    if not failures:
        return ExitCode.OK
    if any(f.kind == "budget" for f in failures):
        return ExitCode.ERROR_BUDGET_EXCEEDED
    return ExitCode.ROLLOUTS_FAILED


def not_run_line(count: int) -> str:
    """What a run continued with ``--retry-errors`` alone says of the ``count`` rollouts it
    did not run because they never finished (and no ``--resume`` asked for them)."""
    return (
        f"{count} rollouts not run: --retry-errors reruns only failed rollouts, and these "
        "never finished; add --resume to run them. The gates count them as failures."
    )


def write_summary(paths: RunPaths, summary: RunSummary) -> None:
    """Save ``summary`` as the run's summary JSON, atomically."""
    tmp = paths.summary.with_name(paths.summary.name + ".tmp")
    tmp.write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(paths.summary)


def check_report_paths(plan: RunPlan) -> None:
    """Raise :class:`~osmo_run.errors.OutputError` for a report the run could not write
    at its end (``--junit-xml``, ``--summary-md``, ``$GITHUB_STEP_SUMMARY``), and for any
    file the run writes that is a file it reads (the dataset, ``--spec``, ``--env-file``)
    or another file it writes (:func:`~osmo_run.run.writing.aliases.check_no_aliases`); called
    before any file changes."""
    settings = plan.settings
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    reports: list[tuple[str, Path | None]] = [
        ("--junit-xml", settings.junit_xml),
        ("--summary-md", settings.summary_md),
        ("GITHUB_STEP_SUMMARY", Path(step_summary) if step_summary else None),
    ]
    paths = plan.paths
    reads: list[tuple[str, Path | None]] = [
        ("the dataset", settings.dataset),
        ("the spec", settings.spec_file),
        ("the env file", settings.env_file),
    ]
    model_log = ("the embedded model's log", paths.results.with_suffix(".llm.log"))
    check_no_aliases(reads, [*run_files(paths, "--output"), model_log, *reports])
    for what, path in reports:
        if path is not None:
            check_writable(path, what)


def finish_run(plan: RunPlan, summary: RunSummary, console: Console, title: str) -> ExitCode:
    """Judge ``summary`` by the plan's gates, save and print it, write the CI reports the
    settings ask for; return the exit code. ``title`` heads the Markdown report.

    A file that cannot be written now (the summary, a report) is one ``error:`` line on
    stderr and in ``--json``'s ``report_errors``; the verdict and its exit code stand.
    """
    settings = plan.settings
    if summary.output != str(plan.paths.results):  # a summary built without its file's name
        summary = dataclasses.replace(summary, output=str(plan.paths.results))
    failures = evaluate(summary, settings.gates)
    code = exit_code_for(summary, failures)
    problems = _attempt("summary", plan.paths.summary, lambda: write_summary(plan.paths, summary))
    console.print(render_summary(summary))
    for failure in failures if settings.gates.given else []:
        console.print(failure.line(), style="red", markup=False, soft_wrap=True)
    if summary.not_run and not summary.stopped_early:  # --retry-errors alone left them
        console.print(not_run_line(summary.not_run), style="red", markup=False, soft_wrap=True)
    if summary.breaker is not None:
        unit = "rows" if plan.samples == 1 else "rollouts"
        line = one_line(summary.breaker.line(unit))
        console.print(line, style="red", markup=False, soft_wrap=True)
    if summary.budget is not None:
        console.print(summary.budget.line(), style="red", markup=False, soft_wrap=True)
    problems += _write_ci_reports(plan, summary, failures, title)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if settings.json_summary:
        verdict = {
            "exit_code": int(code),
            "passed": not failures
            and not summary.interrupted
            and summary.breaker is None
            and summary.budget is None,
            "gate_failures": [vars(f) for f in failures],
            "run_dir": str(plan.paths.directory),
            "summary": summary.to_dict(),
            "report_errors": problems,
        }
        sys.stdout.write(json.dumps(verdict) + "\n")
        sys.stdout.flush()
    return code


def _attempt(what: str, path: Path, write: Callable[[], object]) -> list[str]:
    """Run ``write``; the line saying why it failed (an ``OSError``), or nothing."""
    try:
        write()
    except OSError as exc:
        return [f"{what} {path}: cannot write the report: {exc.strerror or exc}"]
    return []


def _write_ci_reports(
    plan: RunPlan, summary: RunSummary, failures: list[GateFailure], title: str
) -> list[str]:
    """Write the reports the settings ask for; the problems of those that failed."""
    settings, results = plan.settings, plan.paths.results
    problems: list[str] = []
    junit = settings.junit_xml
    if junit is not None:
        suite, threshold = settings.dataset.stem, plan.spec.pass_threshold
        problems += _attempt(
            "--junit-xml", junit, lambda: write_junit(results, junit, suite, threshold)
        )
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if settings.summary_md is not None or step_summary:
        markdown = markdown_summary(results, summary, failures, title)
        markdown_file = settings.summary_md
        if markdown_file is not None:
            problems += _attempt(
                "--summary-md", markdown_file, lambda: _write_text(markdown_file, markdown)
            )
        if step_summary:
            problems += _attempt(
                "GITHUB_STEP_SUMMARY", Path(step_summary), lambda: append_step_summary(markdown)
            )
    return problems


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", errors="backslashreplace")
