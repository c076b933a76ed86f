"""Flags shared by the run commands, and how they are laid over the spec."""

from __future__ import annotations

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
        flag_value="all",
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


def console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


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
