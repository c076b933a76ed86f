"""Check everything that can be checked without running a rollout, and list every problem.

Unlike a run, which stops at the first bad input, validation goes on after a problem so
one pass shows all of them: the spec's fields, the workflow and grader imports, every
dataset row, and for harbor the task directory and the environment's credentials.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from osmo_run.errors import OsmoRunError, SpecError
from osmo_run.run.configuring.spec import RunSpec
from osmo_run.run.configuring.spec_file import anchor_paths, load_spec, read_spec_yaml
from osmo_run.run.reading.dataset import Dataset
from osmo_run.sdk.imports import DependencyImportError, ensure_on_path, resolve_class
from osmo_run.sdk.workflow import AgentWorkflow, Grader

MAX_ROW_PROBLEMS = 50


@dataclass
class Validation:
    """What was checked (``checked``) and every problem found (``problems``)."""

    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _check_imports(
    spec: RunSpec, result: Validation, harbor: bool, set_aside: frozenset[str] = frozenset()
) -> None:
    """Import the workflow and grader, build their configs, check the model sections.
    ``set_aside``: invalid fields left out of ``spec`` (their problems are listed already)."""
    ensure_on_path(spec.code_dir or Path.cwd())
    for field_name, base in (("workflow", AgentWorkflow), ("grader", Grader)):
        path = getattr(spec, field_name)
        if path is None:
            continue
        try:
            resolve_class(path, base, field_name)
            result.checked.append(f"{field_name} {path}")
        except DependencyImportError as exc:
            if harbor:  # its dependencies may exist only in the trial image
                result.checked.append(f"{field_name} {path} (a dependency is missing here: {exc})")
            else:
                result.problems.append(str(exc))
        except OsmoRunError as exc:
            result.problems.append(str(exc))
    judge_given = spec.judge is not None or "judge" in set_aside

    def grader_config() -> object:
        return spec.build_grader_config(harbor, judge_given=judge_given)

    checks = (spec.build_workflow_config, grader_config)
    for check in checks:  # harbor: a grader's extra may be in the trial image only
        try:
            check()
        except OsmoRunError as exc:
            result.problems.append(str(exc))
    for section in (spec.llm, spec.judge):  # the judge's key is checked like the model's
        if section is None:
            continue
        try:
            section.endpoint()
            if section.embedded:
                from osmo_run.llm.embedded import check_available

                check_available()
        except OsmoRunError as exc:
            result.problems.append(str(exc))


def _without_bad_fields(spec_path: Path) -> tuple[RunSpec | None, frozenset[str]]:
    """The spec with its invalid top-level fields left out (their problems are already
    listed), so the checks that do not depend on them still run, and the fields left out;
    ``None`` if that fails."""
    try:
        data = read_spec_yaml(spec_path)
    except SpecError:
        return None, frozenset()
    if not isinstance(data, dict):
        return None, frozenset()
    bad: frozenset[str] = frozenset()
    try:
        RunSpec.model_validate(data)
    except ValidationError as exc:
        bad = frozenset(str(error["loc"][0]) for error in exc.errors() if error["loc"])
        data = {key: value for key, value in data.items() if key not in bad}
    try:
        return anchor_paths(RunSpec.model_validate(data), spec_path.parent), bad
    except ValidationError:
        return None, bad


def problems_beyond_fields(
    spec_path: Path, harbor: bool = False, updates: dict[str, Any] | None = None
) -> list[str]:
    """What :func:`validate` finds in a spec beyond its invalid fields, once those are set
    aside: the workflow and grader imports, the configs and the ``llm`` section
    (``updates``: command-line values laid over the spec first). A run refused for its
    spec lists these too, so it names as many problems as ``osmo-run validate``."""
    spec, set_aside = _without_bad_fields(spec_path)
    if spec is None:
        return []
    if updates:
        spec = spec.model_copy(update=updates)
    result = Validation()
    _check_imports(spec, result, harbor, set_aside)
    return result.problems


def _check_dataset(dataset_path: Path, spec: RunSpec | None, result: Validation) -> None:
    """Read the rows a run of ``spec`` would (the same selection: ``limit``, ``rows``,
    ``shuffle``, ``seed``, ``shard``) with a run's checks, listing every bad row."""
    from osmo_run.run.executing.plan import spec_dataset  # plan imports much that validate need not

    try:
        dataset = spec_dataset(dataset_path, spec) if spec else Dataset(dataset_path)
    except OsmoRunError as exc:
        result.problems.append(str(exc))
        return
    try:
        count, problems = dataset.validate(stop_on_error=False)
    except OsmoRunError as exc:
        # a clash of ids (or a file-level fault) ends Dataset.validate; list the bad rows
        # it had read too, so one pass still shows every problem
        result.problems += [*_bad_rows(dataset)[:MAX_ROW_PROBLEMS], str(exc)]
        return
    result.problems += problems[:MAX_ROW_PROBLEMS]
    if len(problems) > MAX_ROW_PROBLEMS:
        result.problems.append(
            f"{dataset_path}: {len(problems) - MAX_ROW_PROBLEMS} more bad rows not listed"
        )
    if not problems:  # with bad rows, the dataset is not "ok": its problems say why
        result.checked.append(f"dataset {dataset_path}: {count} rows")


def _bad_rows(dataset: Dataset) -> list[str]:
    """Every bad row's problem (``[]`` when the file cannot be read as rows at all)."""
    try:
        return [row.error for row in dataset.rows() if row.error is not None]
    except OsmoRunError:
        return []


def _daytona_problem(timeout_sec: float) -> str | None:
    """What the run's one-call preflight of Daytona would refuse (``None``: nothing)."""
    import importlib.util

    if importlib.util.find_spec("daytona") is None:
        return (
            "environment daytona: Harbor's 'daytona' extra is not installed; "
            "install it with: pip install 'harbor[daytona]'"
        )
    from osmo_run.backends.harbor.remote_probes import probe_daytona
    from osmo_run.sdk.rollout import run_to_completion

    try:
        run_to_completion(probe_daytona(timeout_sec))
    except OsmoRunError as exc:
        return "environment daytona: " + str(exc).removeprefix("--env daytona: ")
    return None


def _check_environment(env: str, result: Validation, timeout_sec: float = 30.0) -> None:
    if env == "docker":
        docker = shutil.which("docker")
        answered = docker is not None and (
            subprocess.run(
                [docker, "info"], capture_output=True, timeout=15, check=False
            ).returncode
            == 0
        )
        if answered:
            result.checked.append("docker engine answers")
        else:
            result.problems.append(
                "environment docker: no Docker engine answers; "
                "run `sudo scripts/provision-docker.sh`"
            )
    elif env == "daytona":
        has_key = bool(os.environ.get("DAYTONA_API_KEY"))
        has_jwt = bool(
            os.environ.get("DAYTONA_JWT_TOKEN") and os.environ.get("DAYTONA_ORGANIZATION_ID")
        )
        problem = _daytona_problem(timeout_sec) if has_key or has_jwt else None
        if problem is not None:
            result.problems.append(problem)
        elif has_key or has_jwt:
            result.checked.append("daytona credentials accepted (one API call)")
        else:
            result.problems.append(
                "environment daytona: set DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN and "
                "DAYTONA_ORGANIZATION_ID)"
            )


def _check_task(task_dir: Path, spec: RunSpec | None, result: Validation) -> None:
    try:
        from osmo_run.backends.harbor.preflight import check_task_dir
    except OsmoRunError as exc:
        result.problems.append(str(exc))
        return
    graded = spec is not None and spec.grader is not None
    problems = check_task_dir(task_dir, graded)
    result.problems += [f"task {task_dir}: {problem}" for problem in problems]
    if not problems:
        result.checked.append(f"task {task_dir}")
    before = len(result.problems)
    if spec is None:
        _check_environment("docker", result)
    else:
        _check_environment(spec.harbor.env, result, spec.harbor.preflight_timeout_sec)
    if not problems and len(result.problems) == before:
        _check_image(task_dir, spec, result)
    if spec is not None and not problems and len(result.problems) == before:
        _check_requirements(task_dir, spec, result)


def _check_image(task_dir: Path, spec: RunSpec | None, result: Validation) -> None:
    """What a harbor run asks before its first row on local Docker: the task's image
    (built or pulled) has the python3 the runner needs."""
    from osmo_run.backends.harbor import docker as docker_ops
    from osmo_run.backends.harbor.preflight import check_image_python
    from osmo_run.sdk.rollout import run_to_completion

    harbor = spec.harbor if spec is not None else None
    if harbor is not None and (harbor.environment_import_path or harbor.env != "docker"):
        return  # a remote environment's image cannot be asked from here

    async def ask() -> str:
        return await check_image_python(await docker_ops.task_image(task_dir))

    try:
        result.checked.append(run_to_completion(ask()))
    except OsmoRunError as exc:
        result.problems.append(f"task {task_dir}: {exc}")


def _check_requirements(task_dir: Path, spec: RunSpec, result: Validation) -> None:
    """What a harbor run checks before its first row: the workflow's requirements have
    wheels for the trial image (the same one-line problem a run stops with)."""
    from osmo_run.backends.harbor import environment_config
    from osmo_run.backends.harbor.preflight import check_requirements
    from osmo_run.backends.harbor.requirements import RequirementOptions
    from osmo_run.sdk.rollout import run_to_completion

    harbor = spec.harbor
    try:
        environment = environment_config(
            harbor.env, harbor.environment_import_path, harbor.environment_kwargs
        )
        checked = run_to_completion(
            check_requirements(
                spec.code_dir or Path.cwd(),
                RequirementOptions.from_fields(spec.requirements.model_dump()),
                [path for path in (spec.workflow, spec.grader) if path],
                task_dir,
                environment,
            )
        )
    except OsmoRunError as exc:
        result.problems.append(str(exc))
        return
    result.checked.append(checked)


def validate(
    spec_path: Path | None,
    dataset_path: Path | None,
    task_dir: Path | None = None,
    harbor: bool = False,
) -> Validation:
    """Run every check that applies and collect the problems; never raises for bad input."""
    result = Validation()
    spec: RunSpec | None = None
    set_aside: frozenset[str] = frozenset()
    if spec_path is not None:
        try:
            spec = load_spec(spec_path)
            result.checked.append(f"spec {spec_path}")
        except OsmoRunError as exc:
            result.problems += str(exc).splitlines()
            spec, set_aside = _without_bad_fields(spec_path)
    if spec is not None:
        _check_imports(spec, result, harbor or task_dir is not None, set_aside)
    if dataset_path is not None:
        _check_dataset(dataset_path, spec, result)
    task = task_dir or (spec.harbor.task_dir if spec is not None and harbor else None)
    if task is not None:
        _check_task(task, spec, result)
    elif harbor and spec is not None and spec.harbor.tasks_root is None:
        result.problems.append(
            "harbor: no task directory; give --task-dir DIR (or harbor.task_dir in the spec)"
        )
    return result
