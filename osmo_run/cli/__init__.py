"""The ``osmo-run`` command line. Parses flags and delegates; heavy imports happen inside
commands so ``osmo-run --help`` stays quick and ``osmo-run local`` never imports harbor."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmo_run.errors import OsmoRunError

if TYPE_CHECKING:
    from rich.console import Console

    from osmo_run.run.spec import RunSpec

app = typer.Typer(
    name="osmo-run",
    help="Run a JSONL dataset through an agent workflow and grader, "
    "in this process or in Harbor trials.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def _load_spec(
    spec: Path | None,
    workflow: str | None,
    grader: str | None,
    overrides: dict[str, Any],
) -> RunSpec:
    """The spec file (or an empty spec) with command-line values laid over it."""
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


@app.command()
def local(
    dataset: Annotated[Path, typer.Argument(help="JSONL dataset, one row per line.")],
    spec: Annotated[Path | None, typer.Option("--spec", "-s", help="YAML run spec.")] = None,
    workflow: Annotated[
        str | None, typer.Option(help="Workflow as module:Class (overrides the spec).")
    ] = None,
    grader: Annotated[
        str | None, typer.Option(help="Grader as module:Class (overrides the spec).")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Output JSONL [default: runs/<dataset>-<time>/results.jsonl]."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace an output file that holds results.")
    ] = False,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", min=1, help="Rows in flight.")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="Run only the first N rows.")
    ] = None,
    agent_timeout: Annotated[
        float | None, typer.Option(help="Workflow deadline per row, seconds.")
    ] = None,
    grader_timeout: Annotated[
        float | None, typer.Option(help="Grader deadline per row, seconds.")
    ] = None,
    bad_rows: Annotated[
        str | None,
        typer.Option(
            help="stop (default): refuse a dataset with a bad line; record: record it and go on."
        ),
    ] = None,
    code_dir: Annotated[
        Path | None,
        typer.Option(help="Directory the workflow's package imports from [default: .]."),
    ] = None,
    display: Annotated[str, typer.Option(help="auto, live, plain or none.")] = "auto",
) -> None:
    """Run every row in this process (LocalBackend): the shortest debugging loop."""
    from osmo_run.backends.local import LocalBackend
    from osmo_run.run.session import RunSettings, default_output, execute_run
    from osmo_run.sdk._imports import ensure_on_path

    run_spec = _load_spec(
        spec,
        workflow,
        grader,
        {
            "agent_sec": agent_timeout,
            "grader_sec": grader_timeout,
            "concurrency": concurrency,
            "limit": limit,
            "bad_rows": bad_rows,
            "code_dir": code_dir,
            "output": output,
        },
    )
    _check_display(display)
    ensure_on_path(run_spec.code_dir or Path.cwd())
    llm = run_spec.llm.endpoint() if run_spec.llm else None
    settings = RunSettings(
        dataset=dataset,
        spec=run_spec,
        output=run_spec.output or default_output(dataset),
        display=display,
        overwrite=overwrite,
        description=f"osmo-run local {dataset}",
    )

    def make_backend() -> LocalBackend:
        return LocalBackend(
            run_spec.workflow,
            run_spec.agent_workflow_config(),
            run_spec.grader,
            run_spec.grader_config_object(),
            llm=llm,
            artifacts_root=settings.output.parent / "artifacts",
        )

    secrets = (llm.api_key,) if llm is not None and llm.api_key else ()
    code = execute_run(settings, make_backend, _console(), secrets)
    raise typer.Exit(int(code))


def _check_display(display: str) -> None:
    from osmo_run.errors import InputError

    if display not in {"auto", "live", "plain", "none"}:
        raise InputError(f"--display: {display!r} is not one of auto, live, plain, none")


@app.command()
def schema() -> None:
    """Print the run spec's JSON Schema (for editor completion and validation)."""
    from osmo_run.run.spec import spec_json_schema

    typer.echo(spec_json_schema())


def main() -> None:
    """Console entry point: expected errors print one message each and set the exit code."""
    try:
        app()
    except OsmoRunError as exc:
        for line in str(exc).splitlines() or [type(exc).__name__]:
            print(f"error: {line}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("OSMO_RUN_DEBUG"):
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in osmo-run; rerun with OSMO_RUN_DEBUG=1 for the traceback "
            "and report it.",
            file=sys.stderr,
        )
        sys.exit(3)
