"""Remove what harbor runs killed with SIGKILL (or a lost machine) left behind: their
containers and networks (found by label) and the trial directories no result row keeps;
and, with ``--images``, the images osmo-run built that no recent run used."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from osmo_run.backends.harbor import docker as docker_ops
from osmo_run.backends.harbor.cache import forget_image, last_used
from osmo_run.errors import DockerCommandError, InputError
from osmo_run.run.report import LoadedRun
from osmo_run.run.runfiles import iter_records
from osmo_run.run.runlock import held_by_another, lock_path, run_locked


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
    """Remove ``run``'s containers, networks and unreferenced trial directories, holding
    its lock (:mod:`osmo_run.run.runlock`) meanwhile; containers of a live run of the same
    id in another directory stay.

    Raises :class:`InputError` when the run has no manifest (its run id is unknown), and
    :class:`~osmo_run.run.runlock.RunLocked` while an invocation still runs it.
    """
    if run.manifest is None:
        raise InputError(f"{run.paths.manifest}: missing; cannot tell which run this is")
    with run_locked(run.paths):
        return await _clean_unlocked(run, run.manifest.run_id)


async def _clean_unlocked(run: LoadedRun, run_id: str) -> Cleaned:
    label = f"{docker_ops.RUN_LABEL}={run_id}"
    own = str(lock_path(run.paths))

    def live_elsewhere(lock_file: str) -> bool:
        return lock_file != own and held_by_another(Path(lock_file))

    containers, networks = await docker_ops.remove_labelled(label, keep=live_elsewhere)
    kept = kept_trial_dirs(run)
    removed = 0
    if run.paths.trials.is_dir():
        for trial in run.paths.trials.iterdir():
            if trial.is_dir() and trial.resolve() not in kept:
                shutil.rmtree(trial, ignore_errors=True)
                removed += 1
    return Cleaned(containers, networks, removed, len(kept))


async def clean_all() -> Cleaned:
    """Remove every container and network any osmo-run run left, on this engine; those of
    runs still alive (their lock file held) stay."""
    containers, networks = await docker_ops.remove_labelled(
        docker_ops.RUN_LABEL, keep=lambda lock_file: held_by_another(Path(lock_file))
    )
    return Cleaned(containers, networks)


IMAGE_REPOSITORIES = ("osmo-run/prebuilt", "osmo-run/deps", "osmo-run/task")
"""What osmo-run builds, children first: a prebuilt image stands on a dependency image,
which stands on a task image (the base ``osmo-run/bookworm`` is provisioned, not built
by runs, and never pruned)."""


@dataclass(frozen=True)
class PrunedImages:
    """What ``cleanup --images`` removed and kept, and the bytes each set takes (an
    image's size counts the layers it shares with others, so sums are upper bounds)."""

    removed: list[str]
    removed_bytes: int
    kept: list[str]
    kept_bytes: int


async def _built_images() -> list[tuple[str, float, int]]:
    """Every image osmo-run built on this engine: tag, creation time (epoch), bytes."""
    found = []
    for repository in IMAGE_REPOSITORIES:
        tags = (
            await docker_ops.docker(
                "image", "ls", "--filter", f"reference={repository}", "--format",
                "{{.Repository}}:{{.Tag}}",
            )
        ).split()  # fmt: skip
        for tag in tags:
            text = await docker_ops.docker(
                "image", "inspect", "--format", "{{.Created}} {{.Size}}", tag, check=False
            )
            created, _, size = text.strip().partition(" ")
            try:
                when = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
            except ValueError:
                when = 0.0
            found.append((tag, when, int(size) if size.isdigit() else 0))
    return found


async def prune_images(unused_for_sec: float) -> PrunedImages:
    """Remove the images osmo-run built that no run used in the last ``unused_for_sec``
    seconds (a run records each image it uses; one never recorded counts from its build).
    An image a container still uses, or another image stands on, is kept: Docker refuses
    to remove it and nothing is forced."""
    horizon = time.time() - unused_for_sec
    removed, kept = [], []
    removed_bytes = kept_bytes = 0
    for tag, created, size in await _built_images():
        used = last_used(tag) or created
        if used >= horizon:
            kept.append(tag)
            kept_bytes += size
            continue
        try:
            await docker_ops.docker("rmi", tag)
        except DockerCommandError:
            kept.append(tag)
            kept_bytes += size
            continue
        forget_image(tag)
        removed.append(tag)
        removed_bytes += size
    return PrunedImages(removed, removed_bytes, kept, kept_bytes)
