"""What a Harbor run checks before any row runs: the task directories, the environment (its
engine, extra and credentials), the Harbor ``EnvironmentConfig`` the flags name, and that
the workflow's requirements have wheels for the trial's image.

Each problem is one line for the person who must fix it; nothing here starts a trial.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Any

from harbor.models.environment_type import EnvironmentType
from harbor.models.trial.config import EnvironmentConfig

from osmo_run.backends.harbor import docker as docker_ops
from osmo_run.backends.harbor.remote_probes import PREFLIGHT_TIMEOUT_SEC, REMOTE_PROBES
from osmo_run.backends.harbor.requirements import RequirementOptions, collect_requirements
from osmo_run.backends.harbor.wheelhouse import image_python, installed_site, target_python
from osmo_run.errors import EnvironmentNotReady, InputError, TaskDirError
from osmo_run.sdk.types import ExecutionRequest

TASK_METADATA_KEY = "harbor_task"
"""A row's metadata key naming its task directory, relative to the tasks root."""


def check_task_dir(task_dir: Path, graded: bool = False) -> list[str]:
    """Every problem that makes ``task_dir`` unusable as a Harbor task (empty if none),
    each a short phrase; callers name the directory once. ``graded``: a grader is
    configured, so Harbor runs its verifier, and the task needs ``tests/test.sh``.

    Beyond what osmo-run needs (``instruction.md``, ``task.toml``, an image), the task is
    loaded with Harbor's own ``Task`` model, as each trial loads it: a field Harbor
    rejects is refused here, before any row, instead of failing every trial.
    """
    if not task_dir.is_dir():
        return ["task directory not found"]
    problems = []
    if not (task_dir / "instruction.md").is_file():
        problems.append("no instruction.md (a Harbor task needs one)")
    if not (task_dir / "task.toml").is_file():
        return ["no task.toml (a Harbor task needs one)", *problems]
    try:
        has_image = docker_ops.task_base_image(task_dir) is not None
    except TaskDirError as exc:
        return [*problems, str(exc)]
    if not has_image and not (task_dir / "environment" / "Dockerfile").is_file():
        problems.append(
            "neither [environment].docker_image in task.toml nor environment/Dockerfile, "
            "so the trial has no image"
        )
    return problems or harbor_task_problems(task_dir, graded)


_SHOWN_PROBLEMS = 3


def harbor_task_problems(task_dir: Path, graded: bool) -> list[str]:
    """What Harbor's ``Task`` model refuses in ``task_dir`` (as a trial would load it
    with verification on when ``graded``), one phrase per problem naming the file and
    field; empty when Harbor takes it."""
    from harbor.models.task.task import Task
    from pydantic import ValidationError

    try:
        Task(task_dir, disable_verification=not graded)
    except ValidationError as exc:
        errors = exc.errors()
        shown = [_field_problem(error) for error in errors[:_SHOWN_PROBLEMS]]
        more = len(errors) - len(shown)
        return shown + ([f"and {more} more problems in task.toml"] if more > 0 else [])
    except FileNotFoundError as exc:
        if graded and not (task_dir / "tests" / "test.sh").is_file():
            return [
                "no tests/test.sh: Harbor requires it of a task whose rows are graded "
                "(osmo-run's grader runs as Harbor's verifier); add one (`exit 0` will do)"
            ]
        return [f"Harbor cannot load the task: {_one_line(str(exc))}"]
    except (OSError, ValueError, RuntimeError, TypeError) as exc:
        return [f"Harbor cannot load the task: {type(exc).__name__}: {_one_line(str(exc))}"]
    return []


def _field_problem(error: Any) -> str:
    """One pydantic error of Harbor's ``TaskConfig`` as ``task.toml [section] field =
    value: why``."""
    location = [str(part) for part in error.get("loc", ())]
    section = ".".join(location[:-1])
    field = location[-1] if location else "?"
    where = f"task.toml [{section}] {field}" if section else f"task.toml {field}"
    value = error.get("input")
    shown = "" if isinstance(value, dict) else f" = {_one_line(repr(value))[:80]}"
    return f"{where}{shown}: {_one_line(str(error.get('msg', 'invalid')))} (Harbor rejects it)"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


async def check_image_python(image: str) -> str:
    """Ask ``image``'s ``python3`` its version once (cached by image id, the probe the
    requirements use) and return it in a phrase; raise :class:`TaskDirError` when there
    is none, or it is older than the sandbox runner needs."""
    from osmo_run.errors import RequirementsError

    try:
        target = await image_python(image)
    except RequirementsError as exc:
        detail = str(exc).removeprefix("requirements: ")
        raise TaskDirError(f"the trial image cannot run workflows: {detail}") from None
    version = tuple(int(part) for part in target.version.split(".")[:2])
    if version < MIN_PYTHON:
        raise TaskDirError(
            f"the trial image {image} has Python {target.version}, and osmo-run runs "
            f"workflows with the image's python3, which must be >= "
            f"{'.'.join(map(str, MIN_PYTHON))}; use an image with a newer python3"
        )
    return f"image {image}: Python {target.version}"


MIN_PYTHON = (3, 11)
"""The oldest Python the sandbox runner (the osmo-run SDK) runs on."""


def task_for_row(
    request: ExecutionRequest,
    task_dir: Path | None,
    tasks_root: Path | None,
    graded: bool = False,
) -> Path:
    """The task directory ``request`` runs in: ``metadata.harbor_task`` under ``tasks_root``
    (default: the parent of ``task_dir``), else ``task_dir``.

    Raises :class:`InputError` for a name that is not a string, leaves the root, or names
    an unusable task.
    """
    name = request.metadata.get(TASK_METADATA_KEY)
    if name is None:
        if task_dir is None:
            raise InputError(f"row {request.id}: no --task-dir and no metadata.{TASK_METADATA_KEY}")
        return task_dir
    root = tasks_root or (task_dir.parent if task_dir else None)
    if root is None or not isinstance(name, str):
        raise InputError(f"row {request.id}: metadata.{TASK_METADATA_KEY} must be a string")
    field = f"row {request.id}: metadata.{TASK_METADATA_KEY} {_shown(name)}"
    problem = _name_problem(name)
    if problem is not None:
        raise InputError(f"{field} {problem}; give a task directory's name under {root}")
    try:
        chosen = (root / name).resolve()
        if not chosen.is_relative_to(root):
            raise InputError(f"{field} leaves the tasks directory {root}")
        problems = check_task_dir(chosen, graded)
    except (OSError, ValueError) as exc:  # a name the file system cannot take
        raise InputError(
            f"{field} cannot name a task directory under {root}: {exc}"[:_MESSAGE_CHARS]
        ) from None
    if problems:
        raise InputError(f"{field} ({chosen}): " + "; ".join(problems))
    return chosen


_NAME_CHARS = 1024
"""The longest ``metadata.harbor_task`` taken (Linux paths are 4,096 bytes at most, names
255; task directories are short)."""
_PART_CHARS = 255
_MESSAGE_CHARS = 1000


def _name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a task directory, or ``None``: empty, too long, or holding
    a character that is not printable (a control or bidi character, an unpaired
    surrogate: no task directory is named so, and a message must not carry it)."""
    if not name.strip():
        return "is empty"
    if len(name) > _NAME_CHARS or any(len(part) > _PART_CHARS for part in name.split("/")):
        return (
            f"is {len(name)} characters long (at most {_NAME_CHARS}, {_PART_CHARS} per directory)"
        )
    if not name.isprintable():  # shown in messages and logs, and no task is named so
        return (
            "holds characters that are not printable (control, format, private-use or "
            "unassigned characters, unpaired surrogates)"
        )
    return None


def _shown(name: str) -> str:
    """``name`` as a message shows it: escaped (no control character reaches a terminal
    or a log) and cut to 80 characters."""
    return repr(name[:80]) + ("..." if len(name) > 80 else "")


def environment_config(
    env: str, import_path: str | None, kwargs: dict[str, Any]
) -> EnvironmentConfig:
    """Harbor's ``EnvironmentConfig`` for an environment type name or a custom class path.

    Raises :class:`InputError` for a type Harbor does not know, listing the known ones.
    """
    if import_path:
        return EnvironmentConfig(import_path=import_path, kwargs=kwargs)
    try:
        kind = EnvironmentType(env)
    except ValueError:
        known = ", ".join(sorted(t.value for t in EnvironmentType))
        raise InputError(f"--env: {env!r} is not a Harbor environment ({known})") from None
    return EnvironmentConfig(type=kind, kwargs=kwargs)


def is_local_docker(environment: EnvironmentConfig) -> bool:
    """Whether trials run in Harbor's own Docker environment on this machine."""
    return (
        environment.import_path is None
        and (environment.type or EnvironmentType.DOCKER) is EnvironmentType.DOCKER
    )


def environment_name(environment: EnvironmentConfig) -> str:
    """The environment as a person names it: its type, or its custom class path."""
    return str(environment.import_path or (environment.type or EnvironmentType.DOCKER).value)


async def check_environment(
    environment: EnvironmentConfig, timeout_sec: float = PREFLIGHT_TIMEOUT_SEC
) -> None:
    """Raise :class:`EnvironmentNotReady` unless trials can start in ``environment``: a
    Docker engine with compose v2 for docker; Harbor's own preflight (its extra, its
    credentials) for the others, then, for a remote environment with a probe
    (:data:`REMOTE_PROBES`), one API call that answers within ``timeout_sec``."""
    if is_local_docker(environment):
        await docker_ops.engine_ready()
        return
    from harbor.environments.factory import EnvironmentFactory

    kind = environment.type
    extra = None if environment.import_path else _missing_harbor_extra(kind)
    if extra is not None:
        raise EnvironmentNotReady(
            f"--env {extra}: Harbor's {extra!r} extra is not installed; "
            f"install it with: pip install 'harbor[{extra}]'"
        )
    try:
        EnvironmentFactory.run_preflight(
            type=kind, import_path=environment.import_path, kwargs=environment.kwargs
        )
    except SystemExit as exc:
        raise EnvironmentNotReady(" ".join(str(exc.code).split())) from None
    except Exception as exc:
        raise EnvironmentNotReady(
            f"the {environment_name(environment)} environment is not usable: "
            f"{' '.join(str(exc).split())}"
        ) from None
    probe = None if environment.import_path else REMOTE_PROBES.get(kind)
    if probe is not None:
        await probe(timeout_sec)


def _missing_harbor_extra(kind: EnvironmentType | None) -> str | None:
    """The Harbor extra named like ``kind`` when a package it requires is not installed."""
    if kind is None:
        return None
    try:
        requirements = importlib.metadata.requires("harbor") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    in_extra = re.compile(rf"""extra\s*==\s*['"]{re.escape(kind.value)}['"]""")
    for requirement in requirements:
        spec, _, markers = requirement.partition(";")
        name = re.match(r"[A-Za-z0-9._-]+", spec.strip())
        if not in_extra.search(markers) or name is None or name.group() == "harbor":
            continue
        try:
            importlib.metadata.distribution(name.group())
        except importlib.metadata.PackageNotFoundError:
            return str(kind.value)
    return None


async def check_requirements(
    code_dir: Path,
    options: RequirementOptions,
    import_paths: list[str],
    task_dir: Path,
    environment: EnvironmentConfig,
) -> str:
    """Collect the workflow's requirements and fetch them for ``task_dir``'s image, as a
    run would before its first row; return what was checked, in a phrase.

    Raises :class:`~osmo_run.errors.RequirementsError` (the line a run would stop with),
    or :class:`DockerCommandError` when the task's image cannot be had.
    """
    requirements = collect_requirements(code_dir, options, import_paths)
    if not requirements.requirements:
        return "requirements: none to install in trials"
    image = await docker_ops.task_image(task_dir) if is_local_docker(environment) else None
    target = await target_python(image, options, environment_name(environment))
    await installed_site(requirements, target)
    count = len(requirements.requirements)
    return (
        f"requirements: {count} ({', '.join(requirements.requirements)}) have wheels for "
        f"the trial's {target.describe()}"
    )
