"""``osmo-run validate``: every check that needs no rollout, every problem listed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from osmo_run.cli.options import EnvFileOption


def validate(
    spec: Annotated[Path | None, typer.Argument(help="YAML run spec.")] = None,
    dataset: Annotated[Path | None, typer.Argument(help="Dataset: JSONL, CSV or Parquet.")] = None,
    task_dir: Annotated[
        Path | None, typer.Option(help="Harbor task directory to check (and its environment).")
    ] = None,
    harbor: Annotated[
        bool, typer.Option(help="Check the spec's harbor section (task and environment) too.")
    ] = False,
    env_file: EnvFileOption = None,
) -> None:
    """Check a spec, its workflow and grader, a dataset and a Harbor task without running
    anything; list every problem and exit 2 if there is one."""
    from osmo_run.errors import InputError
    from osmo_run.run.configuring.envfile import apply_env_file
    from osmo_run.run.executing.validate import validate as run_checks

    if spec is None and dataset is None and task_dir is None:
        raise InputError("give a spec, a dataset or --task-dir to validate")
    if env_file is not None:
        apply_env_file(env_file)  # the spec's api_key_env checks see what a run would
    result = run_checks(spec, dataset, task_dir, harbor)
    for item in result.checked:
        typer.echo(f"ok: {item}")
    for problem in result.problems:
        typer.echo(f"problem: {problem}", err=True)
    if result.problems:
        count = len(result.problems)
        typer.echo(f"{count} problem{'s' if count != 1 else ''} found", err=True)
        raise typer.Exit(2)
    typer.echo("no problems found")
