"""``osmo-run cleanup``: remove what killed harbor runs left behind."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer


def cleanup(
    runs: Annotated[
        list[Path] | None,
        typer.Argument(help="Run directories (or results files) whose leftovers to remove."),
    ] = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Remove every osmo-run container and network.")
    ] = False,
) -> None:
    """Remove the containers, networks and unreferenced trial directories that a run
    killed with SIGKILL (or a lost machine) left behind. Trial directories that a result
    row points at (kept for debugging) stay."""
    from osmo_run.backends.harbor import docker as docker_ops
    from osmo_run.errors import InputError
    from osmo_run.run.report import LoadedRun
    from osmo_run.run.runfiles import iter_records
    from osmo_run.sdk._rollout import run_to_completion

    if not runs and not all_runs:
        raise InputError("name the run directories to clean up, or pass --all")
    for target in runs or []:
        run = LoadedRun.load(target)
        if run.manifest is None:
            raise InputError(f"{run.paths.manifest}: missing; cannot tell which run this is")
        label = f"{docker_ops.RUN_LABEL}={run.manifest.run_id}"
        containers, networks = run_to_completion(docker_ops.remove_labelled(label))
        kept = {
            str(Path(str(record["backend"]["trial_dir"])).resolve())
            for record in iter_records(run.paths.results)
            if isinstance(record.get("backend"), dict) and record["backend"].get("trial_dir")
        }
        removed = 0
        if run.paths.trials.is_dir():
            for trial in run.paths.trials.iterdir():
                if trial.is_dir() and str(trial.resolve()) not in kept:
                    shutil.rmtree(trial, ignore_errors=True)
                    removed += 1
        typer.echo(
            f"{run.paths.directory}: removed {containers} containers, {networks} networks, "
            f"{removed} trial directories ({len(kept)} kept: result rows point at them)"
        )
    if all_runs:
        containers, networks = run_to_completion(docker_ops.remove_labelled(docker_ops.RUN_LABEL))
        typer.echo(f"removed {containers} osmo-run containers and {networks} networks")
