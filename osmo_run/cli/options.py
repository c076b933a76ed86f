"""Flags shared by the run commands, and how they are laid over the spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from osmo_run.run.spec import RunSpec

SpecOption = Annotated[Path | None, typer.Option("--spec", "-s", help="YAML run spec.")]
WorkflowOption = Annotated[
    str | None, typer.Option(help="Workflow as module:Class (overrides the spec).")
]
GraderOption = Annotated[
    str | None, typer.Option(help="Grader as module:Class (overrides the spec).")
]
OutputOption = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", help="Output JSONL [default: runs/<dataset>-<time>/results.jsonl]."
    ),
]
OverwriteOption = Annotated[
    bool, typer.Option(help="Replace an output file that already holds results.")
]
ConcurrencyOption = Annotated[
    int | None, typer.Option("--concurrency", "-c", min=1, help="Rows in flight.")
]
LimitOption = Annotated[
    int | None, typer.Option("--limit", "-n", min=1, help="Run only the first N rows.")
]
AgentTimeoutOption = Annotated[
    float | None, typer.Option(help="Workflow deadline per row, seconds.")
]
GraderTimeoutOption = Annotated[
    float | None, typer.Option(help="Grader deadline per row, seconds.")
]
BadRowsOption = Annotated[
    str | None,
    typer.Option(
        help="stop (default): refuse a dataset with a bad line; record: record it, go on."
    ),
]
CodeDirOption = Annotated[
    Path | None, typer.Option(help="Directory the workflow's package imports from [default: .].")
]
DisplayOption = Annotated[str, typer.Option(help="auto, live, plain or none.")]
ResumeOption = Annotated[
    bool,
    typer.Option(help="Continue the run in --output: keep finished rows, run the rest."),
]
RetryErrorsOption = Annotated[
    str | None,
    typer.Option(
        "--retry-errors",
        help="Rerun the run's failed rows; optionally only these categories, comma-separated "
        "(e.g. --retry-errors timeout,infra_error). Earlier attempts stay on record.",
    ),
]
SamplesOption = Annotated[
    int | None, typer.Option("--samples", min=1, help="Rollouts per row (pass@k).")
]
ShardOption = Annotated[
    str | None,
    typer.Option(help="K/N: run the rows whose index is K-1 modulo N (split across machines)."),
]


FailUnderOption = Annotated[
    float | None,
    typer.Option(help="Gate: fail unless the mean reward (failed rows as 0) is at least X."),
]
MinPassRateOption = Annotated[
    float | None,
    typer.Option(help="Gate: fail unless this share of rollouts reaches the pass threshold."),
]
MaxErrorsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--max-errors",
        help="Error budget: at most N failed rollouts, or CATEGORY=N for one category "
        "(repeatable).",
    ),
]
MaxErrorRateOption = Annotated[
    list[str] | None,
    typer.Option(
        "--max-error-rate",
        help="Error budget as a fraction: F, or CATEGORY=F (repeatable).",
    ),
]
JunitOption = Annotated[
    Path | None, typer.Option("--junit-xml", help="Write a JUnit XML report, a case per rollout.")
]
SummaryMdOption = Annotated[
    Path | None,
    typer.Option(
        "--summary-md", help="Write a Markdown summary (also appended to $GITHUB_STEP_SUMMARY)."
    ),
]
JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print the final summary as one JSON object on stdout."),
]
PlainOption = Annotated[bool, typer.Option("--plain", help="Same as --display plain.")]
SmokeOption = Annotated[
    bool,
    typer.Option(
        help="CI smoke test: a fixed random subset of rows (--smoke-rows, --seed), "
        "timeouts capped at 60 s, fail-fast."
    ),
]
SmokeRowsOption = Annotated[int, typer.Option(min=1, help="Rows in a --smoke run.")]
SeedOption = Annotated[int, typer.Option(help="Seed choosing the --smoke rows.")]
FailFastOption = Annotated[
    bool, typer.Option(help="Start no further rows after the first failed rollout.")
]


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(highlight=False, stderr=stderr)


def gates_from_flags(
    fail_under: float | None,
    min_pass_rate: float | None,
    max_errors: list[str] | None,
    max_error_rate: list[str] | None,
) -> Any:
    """The :class:`~osmo_run.run.gates.Gates` the flags ask for."""
    from osmo_run.run.gates import Gates, parse_budget

    budgets = [parse_budget(v, rate=False) for v in max_errors or []]
    budgets += [parse_budget(v, rate=True) for v in max_error_rate or []]
    return Gates(fail_under=fail_under, min_pass_rate=min_pass_rate, budgets=tuple(budgets))


def check_display(display: str) -> None:
    from osmo_run.errors import InputError

    if display not in {"auto", "live", "plain", "none"}:
        raise InputError(f"--display: {display!r} is not one of auto, live, plain, none")


def load_spec_with_flags(
    spec: Path | None,
    workflow: str | None,
    grader: str | None,
    overrides: dict[str, Any],
) -> RunSpec:
    """The spec file (or an empty spec) with command-line values laid over it.

    ``overrides`` holds top-level spec fields plus ``agent_sec``/``grader_sec`` (timeouts)
    and ``harbor`` (a dict of harbor fields); ``None`` values leave the spec's value.
    Raises :class:`~osmo_run.errors.SpecError` naming every invalid field.
    """
    from pydantic import ValidationError

    from osmo_run.errors import SpecError
    from osmo_run.run.spec import RunSpec, format_validation_error, load_spec

    if spec is None and workflow is None:
        raise SpecError(
            "give a run spec with --spec FILE, or a workflow with --workflow module:Class"
        )
    base = load_spec(spec) if spec is not None else None
    data = base.model_dump(exclude_unset=True) if base is not None else {}
    if workflow is not None:
        data["workflow"] = workflow
    if grader is not None:
        data["grader"] = grader
    overrides = dict(overrides)
    timeouts = dict(data.get("timeouts") or {})
    for key in ("agent_sec", "grader_sec"):
        value = overrides.pop(key, None)
        if value is not None:
            timeouts[key] = value
    data["timeouts"] = timeouts
    harbor = dict(data.get("harbor") or {})
    harbor.update({k: v for k, v in overrides.pop("harbor", {}).items() if v is not None})
    data["harbor"] = harbor
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        source = "command line" if spec is None else f"{spec} + command line"
        raise SpecError(format_validation_error(source, exc, RunSpec)) from None


def expand_bare_retry_errors(args: list[str]) -> list[str]:
    """``args`` with ``all`` after a bare ``--retry-errors``: the parser has no options with
    an optional value, so ``--retry-errors`` followed by nothing, another option or the
    dataset (anything but a comma-separated list of names) means every category."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        out.append(arg)
        if arg == "--retry-errors":
            value = args[i + 1] if i + 1 < len(args) else ""
            if not re.fullmatch(r"[\w ,]+", value):
                out.append("all")
    return out


def retry_categories(value: str | None) -> frozenset[str] | None:
    """``--retry-errors`` as a set of categories (empty: every category); ``None`` if absent.

    Raises :class:`~osmo_run.errors.InputError` naming an unknown category.
    """
    from osmo_run.errors import InputError
    from osmo_run.sdk.types import ErrorCategory

    if value is None:
        return None
    if value == "all":
        return frozenset()
    names = frozenset(part.strip() for part in value.split(",") if part.strip())
    known = {c.value for c in ErrorCategory}
    unknown = sorted(names - known)
    if unknown:
        raise InputError(
            f"--retry-errors: {', '.join(unknown)} is not an error category "
            f"({', '.join(sorted(known))})"
        )
    return names


def ci_settings(
    fail_under: float | None,
    min_pass_rate: float | None,
    max_errors: list[str] | None,
    max_error_rate: list[str] | None,
    junit_xml: Path | None,
    summary_md: Path | None,
    json_summary: bool,
    smoke: bool,
    smoke_rows: int,
    seed: int,
    fail_fast: bool,
) -> dict[str, Any]:
    """The :class:`~osmo_run.run.session.RunSettings` fields of the CI flags."""
    return {
        "gates": gates_from_flags(fail_under, min_pass_rate, max_errors, max_error_rate),
        "junit_xml": junit_xml,
        "summary_md": summary_md,
        "json_summary": json_summary,
        "smoke_rows": smoke_rows if smoke else None,
        "seed": seed,
        "fail_fast": fail_fast,
    }
