"""``osmo-run cleanup``: remove what killed harbor runs left behind, and old images."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``90s`` or ``0`` as seconds; :class:`InputError` else."""
    from osmo_run.errors import InputError

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None or (not match[2] and float(match[1]) != 0):
        raise InputError(f"--unused-for {text!r}: give a duration like 7d, 12h, 30m or 0")
    return float(match[1]) * _UNITS.get(match[2] or "s", 1)


def _prune_images(unused_for: str) -> None:
    from osmo_run.backends.harbor.cleanup import prune_images
    from osmo_run.sdk.rollout import run_to_completion

    done = run_to_completion(prune_images(_seconds(unused_for)))
    typer.echo(
        f"removed {len(done.removed)} osmo-run images ({done.removed_bytes / 1e6:,.0f} MB); "
        f"kept {len(done.kept)} ({done.kept_bytes / 1e6:,.0f} MB: used within {unused_for}, "
        "or in use)"
    )
    for tag in done.removed:
        typer.echo(f"  removed {tag}")


def cleanup(
    runs: Annotated[
        list[Path] | None,
        typer.Argument(help="Run directories (or results files) whose leftovers to remove."),
    ] = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Remove every osmo-run container and network.")
    ] = False,
    images: Annotated[
        bool,
        typer.Option(
            "--images",
            help="Remove the images osmo-run built (prebuilt, dependency and task images) "
            "that no run used within --unused-for.",
        ),
    ] = False,
    unused_for: Annotated[
        str, typer.Option(help="With --images: how long unused an image must be (7d, 12h, 0).")
    ] = "7d",
) -> None:
    """Remove the containers, networks and unreferenced trial directories that a run
    killed with SIGKILL (or a lost machine) left behind. Trial directories that a result
    row points at (kept for debugging) stay. ``--images`` prunes osmo-run's images."""
    from osmo_run.backends.harbor.cleanup import clean_all, clean_run
    from osmo_run.errors import InputError
    from osmo_run.run.reporting.report import LoadedRun
    from osmo_run.sdk.rollout import run_to_completion

    if not runs and not all_runs and not images:
        raise InputError("name the run directories to clean up, or pass --all or --images")
    _seconds(unused_for)  # a bad duration stops before anything is removed
    for target in runs or []:
        run = LoadedRun.load(target)
        done = run_to_completion(clean_run(run.paths, run.manifest))
        typer.echo(
            f"{run.paths.directory}: removed {done.containers} containers, {done.networks} "
            f"networks, {done.trial_dirs} trial directories ({done.kept_trial_dirs} kept: "
            f"result rows point at them), {done.staging} staging copies"
        )
    if all_runs:
        done = run_to_completion(clean_all())
        typer.echo(f"removed {done.containers} osmo-run containers and {done.networks} networks")
    if images:
        _prune_images(unused_for)
