"""Remove what harbor runs killed with SIGKILL (or a lost machine) left behind: their
containers and networks (found by label) and the trial directories no result row keeps."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from osmo_run.backends.harbor import docker as docker_ops
from osmo_run.errors import InputError
from osmo_run.run.report import LoadedRun
from osmo_run.run.runfiles import iter_records


@dataclass(frozen=True)
class Cleaned:
    """What a cleanup removed, and how many trial directories it kept."""

    containers: int
    networks: int
    trial_dirs: int = 0
    kept_trial_dirs: int = 0


def kept_trial_dirs(run: LoadedRun) -> set[Path]:
    """The trial directories result rows point at (kept for debugging), resolved."""
    return {
        Path(str(record["backend"]["trial_dir"])).resolve()
        for record in iter_records(run.paths.results)
        if isinstance(record.get("backend"), dict) and record["backend"].get("trial_dir")
    }


async def clean_run(run: LoadedRun) -> Cleaned:
    """Remove ``run``'s containers, networks and unreferenced trial directories.

    Raises :class:`InputError` when the run has no manifest (its run id is unknown).
    """
    if run.manifest is None:
        raise InputError(f"{run.paths.manifest}: missing; cannot tell which run this is")
    label = f"{docker_ops.RUN_LABEL}={run.manifest.run_id}"
    containers, networks = await docker_ops.remove_labelled(label)
    kept = kept_trial_dirs(run)
    removed = 0
    if run.paths.trials.is_dir():
        for trial in run.paths.trials.iterdir():
            if trial.is_dir() and trial.resolve() not in kept:
                shutil.rmtree(trial, ignore_errors=True)
                removed += 1
    return Cleaned(containers, networks, removed, len(kept))


async def clean_all() -> Cleaned:
    """Remove every container and network any osmo-run run left, on this engine."""
    containers, networks = await docker_ops.remove_labelled(docker_ops.RUN_LABEL)
    return Cleaned(containers, networks)
