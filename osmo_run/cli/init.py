"""``osmo-run init``: a new project that runs green at once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def init(
    directory: Annotated[
        Path,
        typer.Argument(
            metavar="NAME",
            help="The project's directory (new, or empty); its name names the package.",
        ),
    ],
) -> None:
    """Create a project: a package with a workflow and a grader, a spec, a five-row dataset,
    a pyproject.toml and a test using osmo_run.testing. Refuses a non-empty directory."""
    from osmo_run.scaffold import create_project

    project = create_project(directory)
    typer.echo(f"created {project.directory}/ (package {project.package}):")
    for path in project.files:
        typer.echo(f"  {path}")
    typer.echo("next:")
    typer.echo(f"  cd {project.directory}")
    typer.echo("  osmo-run local data/rows.jsonl --spec spec.yaml")
    typer.echo("  python -m pytest")
