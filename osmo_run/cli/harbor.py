"""``osmo-run harbor``: every row in its own Harbor trial environment."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmo_run.cli.flags import CIFlags, HarborFlags, RunFlags, takes_flag_groups
from osmo_run.cli.launch import launch, load_run_spec, run_settings

if TYPE_CHECKING:
    from osmo_run.backends.harbor import HarborBackend
    from osmo_run.run.configuring.overrides import HarborOverrides
    from osmo_run.run.configuring.spec import HarborSpec, RunSpec
    from osmo_run.run.executing.settings import BackendContext, BackendFactory


def _env_kwargs(pairs: list[str]) -> dict[str, Any]:
    from osmo_run.errors import InputError

    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--env-kwarg {pair!r}: expected KEY=VALUE")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return kwargs


def _instruction_dataset(task_dir: Path) -> Path:
    """A one-row dataset holding the task's own instruction: ``<task dir name>.jsonl`` in
    a directory named by its content's hash under osmo-run's cache (regrade and the viewer
    find it again), written through a private temporary file and a rename, so no other
    task's instruction and no planted link is ever read or written; when the cache
    cannot be written, in a private directory of its own.

    Raises :class:`TaskDirError` when the instruction cannot be read or is not UTF-8, and
    :class:`InputError` when neither place can be written.
    """
    from osmo_run.backends.harbor.cache import cache_dir
    from osmo_run.errors import InputError, TaskDirError

    instruction = task_dir / "instruction.md"
    try:
        text = instruction.read_bytes().decode("utf-8")
    except OSError as exc:
        raise TaskDirError(
            f"{instruction}: cannot read the task's instruction ({exc.strerror})"
        ) from None
    except UnicodeDecodeError as exc:
        raise TaskDirError(
            f"{instruction}: is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
            f"{exc.start}); save it as UTF-8"
        ) from None
    content = (json.dumps({"id": task_dir.name, "prompt": text}) + "\n").encode("utf-8")
    digest = hashlib.sha256(content).hexdigest()[:24]
    try:
        return _write_private(cache_dir() / "instructions" / digest, task_dir.name, content)
    except OSError:
        pass
    try:
        private = Path(tempfile.mkdtemp(prefix="osmo-run-instruction-"))
        return _write_private(private, task_dir.name, content)
    except OSError as exc:
        raise InputError(
            f"{instruction}: cannot write it as a one-row dataset: neither osmo-run's cache "
            f"({cache_dir()}) nor the temporary directory is writable ({exc.strerror}); set "
            "OSMO_RUN_CACHE_DIR to a writable directory, or pass a dataset"
        ) from None


def _write_private(directory: Path, name: str, content: bytes) -> Path:
    """``content`` as ``directory/<name>.jsonl`` (owner-only), replaced atomically: a link
    planted there is replaced, never followed."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    owner = directory.lstat()
    if directory.is_symlink() or owner.st_uid != os.getuid() or owner.st_mode & 0o022:
        raise PermissionError(f"{directory} is not this user's alone")
    path = directory / f"{name}.jsonl"
    descriptor, name_of_scratch = tempfile.mkstemp(dir=directory, prefix=".instruction-")
    scratch = Path(name_of_scratch)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
        scratch.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            scratch.unlink()
        raise
    return path


def _identity(harbor: HarborSpec) -> dict[str, Any]:
    """The harbor settings that define a run's results (they enter its run id)."""
    return {
        "harbor_task_dir": str(harbor.task_dir),
        "harbor_tasks_root": str(harbor.tasks_root),
        "harbor_env": harbor.environment_import_path or harbor.env,
        "harbor_env_kwargs": harbor.environment_kwargs,
    }


def _never_staged(context: BackendContext, dataset: Path | None) -> tuple[Path, ...]:
    """What trials must not get even inside the code dir: the dataset (its labels) and
    where the run writes (its directory, or its files when that is the code dir: a served
    run's admissions hold labels too)."""
    paths = context.paths
    return (
        *((dataset,) if dataset is not None else ()),
        paths.admitted,
        paths.directory,
        paths.results,
        paths.summary,
        paths.manifest,
        paths.attempts,
        paths.turns,
        paths.errors,
        paths.artifacts,
        paths.trials,
    )


def _backend_factory(
    spec: RunSpec, environment: Any, user_code_dir: Path | None, dataset: Path | None
) -> BackendFactory:
    """Makes the run's HarborBackend once the run knows its paths and endpoints;
    ``environment`` is Harbor's ``EnvironmentConfig`` (harbor is imported in backends only)."""
    from osmo_run.backends.harbor import HarborBackend
    from osmo_run.backends.harbor.requirements import RequirementOptions
    from osmo_run.run.writing.runlock import lock_path

    task = spec.harbor
    requirements = RequirementOptions.from_fields(spec.requirements.model_dump())

    def make_backend(context: BackendContext) -> HarborBackend:
        return HarborBackend(
            task_dir=task.task_dir,
            tasks_root=task.tasks_root,
            user_code_dir=user_code_dir or spec.code_dir or Path.cwd(),
            workflow=spec.workflow,
            workflow_config=spec.build_workflow_config(),
            grader=spec.grader,
            # the trial's image may have a grader's optional library this host lacks
            grader_config=spec.build_grader_config(tolerate_missing_deps=True),
            environment_config=environment,
            prebuild_local_image=task.prebuild,
            cleanup_successful_trials=not task.keep_trials,
            trials_dir=task.trials_dir or context.paths.trials,
            # the run's own trials directory: what no row keeps is an earlier invocation's
            results_path=None if task.trials_dir else context.paths.results,
            run_dir=context.paths.directory,
            preflight_timeout_sec=task.preflight_timeout_sec,
            run_id=context.run_id,
            llm=context.llm,
            llm_api_key_env=spec.llm.api_key_env if spec.llm else None,
            judge=context.judge,
            judge_api_key_env=spec.judge.api_key_env if spec.judge else None,
            requirements=requirements,
            code_include=tuple(spec.code.include),
            secrets=context.secrets,
            never_staged=_never_staged(context, dataset),
            run_lock=lock_path(context.paths),
        )

    return make_backend


def harbor_overrides(flags: HarborFlags) -> HarborOverrides:
    """The spec fields ``flags`` set (``--user-code-dir`` is no spec field)."""
    from osmo_run.run.configuring.overrides import HarborOverrides

    return HarborOverrides(
        task_dir=flags.task_dir,
        tasks_root=flags.tasks_root,
        env=flags.env,
        environment_import_path=flags.environment_import_path,
        environment_kwargs=_env_kwargs(flags.env_kwarg or []) or None,
        prebuild=flags.prebuild,
        keep_trials=flags.keep_trials,
        trials_dir=flags.trials_dir,
        preflight_timeout_sec=flags.preflight_timeout,
    )


def harbor_backend_factory(
    spec: RunSpec, flags: HarborFlags, dataset: Path | None
) -> BackendFactory:
    """What makes the run's :class:`HarborBackend` from ``spec`` (its ``harbor:`` section,
    ``flags`` laid over it by :func:`harbor_overrides`), shared by ``osmo-run harbor`` and
    ``osmo-run serve``; ``dataset`` (``None`` when rows arrive over HTTP) is never staged.
    Raises :class:`~osmo_run.errors.InputError` when the spec names no task, or an
    environment Harbor does not know."""
    from osmo_run.backends.harbor import environment_config
    from osmo_run.errors import InputError

    task = spec.harbor
    if task.task_dir is None and task.tasks_root is None:
        raise InputError("give --task-dir DIR (or harbor.task_dir in the spec)")
    environment = environment_config(
        task.env, task.environment_import_path, task.environment_kwargs
    )
    return _backend_factory(spec, environment, flags.user_code_dir, dataset)


@takes_flag_groups
def harbor(
    *,
    dataset: Annotated[
        Path | None,
        typer.Argument(
            help="Dataset (JSONL, CSV or Parquet); without one, the task's instruction "
            "is the only row."
        ),
    ] = None,
    trials: HarborFlags,
    run: RunFlags,
    ci: CIFlags,
) -> None:
    """Run every row in its own Harbor trial (HarborBackend): isolation per row."""
    from osmo_run.errors import InputError

    spec = load_run_spec(run, harbor=harbor_overrides(trials), seed=ci.seed)
    task = spec.harbor
    if dataset is None and task.task_dir is None and task.tasks_root is not None:
        raise InputError("without a dataset, --task-dir names the task whose instruction runs")
    make_backend = harbor_backend_factory(spec, trials, dataset)
    if dataset is None:
        assert task.task_dir is not None
        dataset = _instruction_dataset(task.task_dir)
    settings = run_settings(
        dataset,
        spec,
        run,
        ci,
        backend_name="harbor",
        description=f"osmo-run harbor {dataset} · env {task.env}",
        backend_identity=_identity(spec.harbor),
        info={"prebuild": task.prebuild, "keep_trials": task.keep_trials},
    )

    launch(settings, make_backend)
