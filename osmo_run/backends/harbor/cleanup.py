"""Remove what harbor runs killed with SIGKILL (or a lost machine) left behind: their
containers and networks (found by label), their staging copies (the SDK, the user's code
with its ``.env``, the trials' inputs) and the trial directories no result row keeps;
and, with ``--images``, the images osmo-run built that no recent run used."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from osmo_run.backends.harbor import docker as docker_ops
from osmo_run.backends.harbor.cache import forget_image, last_used
from osmo_run.errors import DockerCommandError, InputError
from osmo_run.run.writing.manifest import Manifest
from osmo_run.run.writing.runfiles import RunPaths, iter_records
from osmo_run.run.writing.runlock import held_by_another, lock_path, run_locked
from osmo_run.sdk.types import BackendDetails


@dataclass(frozen=True)
class Cleaned:
    """What a cleanup removed, and how many trial directories it kept."""

    containers: int
    networks: int
    trial_dirs: int = 0
    kept_trial_dirs: int = 0
    staging: int = 0


STAGING_RECORD = ".osmo-run-staging-"
"""Prefix of the file in a run's directory that names one invocation's staging directory
(``.osmo-run-staging-<invocation>``), so a later invocation, or ``osmo-run cleanup``,
removes the staging a killed one left in the temporary directory."""


def staging_prefix(invocation: str) -> str:
    """The name every staging directory of ``invocation`` starts with (in the system's
    temporary directory)."""
    return f"osmo-run-{invocation}-"


def record_staging(run_dir: Path, run_id: str, invocation: str, staging: Path) -> None:
    """Note in ``run_dir`` that ``invocation`` of the run ``run_id`` staged into
    ``staging``."""
    record = run_dir / f"{STAGING_RECORD}{invocation}"
    record.write_text(f"{run_id}\n{staging}\n", encoding="utf-8")


def forget_staging(run_dir: Path, invocation: str) -> None:
    """Drop ``invocation``'s record (its staging is gone). Never raises."""
    with contextlib.suppress(OSError):
        (run_dir / f"{STAGING_RECORD}{invocation}").unlink(missing_ok=True)


def remove_staging(run_dir: Path, run_id: str | None = None, keep: str | None = None) -> int:
    """Remove the staging directories the records in ``run_dir`` name (of the run
    ``run_id`` only when given: runs may share a directory; every invocation's but
    ``keep``'s) and their records; return how many were removed. A record naming anything
    but a staging directory of its invocation directly in the temporary directory is
    dropped, never followed. Never raises."""
    removed = 0
    temp = Path(tempfile.gettempdir()).resolve()
    with contextlib.suppress(OSError):
        for record in run_dir.glob(f"{STAGING_RECORD}*"):
            invocation = record.name.removeprefix(STAGING_RECORD)
            if invocation == keep or not record.is_file():
                continue
            with contextlib.suppress(OSError, ValueError):
                recorded_run, _, path = record.read_text(encoding="utf-8").partition("\n")
                if run_id is not None and recorded_run != run_id:
                    continue
                staged = Path(path.strip())
                if (
                    staged.parent.resolve() == temp
                    and staged.name.startswith(staging_prefix(invocation))
                    and staged.is_dir()
                    and not staged.is_symlink()
                ):
                    shutil.rmtree(staged, ignore_errors=True)
                    removed += 1
            record.unlink(missing_ok=True)
    return removed


def referenced_trial_dirs(results: Path) -> set[Path]:
    """The trial directories the rows of ``results`` point at (kept for debugging),
    resolved; none when the file does not exist yet."""
    if not results.is_file():
        return set()
    kept = (BackendDetails.from_dict(record.get("backend")) for record in iter_records(results))
    return {Path(details.trial_dir).resolve() for details in kept if details.trial_dir}


def remove_unreferenced_trial_dirs(trials_dir: Path, results: Path) -> int:
    """Remove the trial directories in ``trials_dir`` no row of ``results`` points at;
    return how many. Call it only while no trial of the run is running."""
    kept = referenced_trial_dirs(results)
    removed = 0
    if trials_dir.is_dir():
        for trial in trials_dir.iterdir():
            if trial.is_dir() and not trial.is_symlink() and trial.resolve() not in kept:
                shutil.rmtree(trial, ignore_errors=True)
                removed += 1
    return removed


async def clean_run(paths: RunPaths, manifest: Manifest | None) -> Cleaned:
    """Remove the containers, networks, staging copies and unreferenced trial directories of
    the run at ``paths``, holding its lock (:mod:`osmo_run.run.writing.runlock`) meanwhile;
    containers of a live run of the same id in another directory stay. Takes the run's paths
    and manifest, not a loaded report: backends sit below reporting (tests/test_layers.py).

    Raises :class:`InputError` when ``manifest`` is None (the run id is unknown), and
    :class:`~osmo_run.run.writing.runlock.RunLocked` while an invocation still runs it.
    """
    if manifest is None:
        raise InputError(f"{paths.manifest}: missing; cannot tell which run this is")
    with run_locked(paths):
        return await _clean_unlocked(paths, manifest.run_id)


async def _clean_unlocked(paths: RunPaths, run_id: str) -> Cleaned:
    label = f"{docker_ops.RUN_LABEL}={run_id}"
    own = str(lock_path(paths))

    def live_elsewhere(lock_file: str) -> bool:
        return lock_file != own and held_by_another(Path(lock_file))

    containers, networks = await docker_ops.remove_labelled(label, keep=live_elsewhere)
    kept = referenced_trial_dirs(paths.results)
    staging = remove_staging(paths.directory)
    removed = remove_unreferenced_trial_dirs(paths.trials, paths.results)
    return Cleaned(containers, networks, removed, len(kept), staging)


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
