"""``osmo-run harbor``: every row in its own Harbor trial environment."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmo_run.cli.flags import CIFlags, RunFlags, takes_flag_groups
from osmo_run.cli.launch import launch, load_run_spec, run_settings

if TYPE_CHECKING:
    from osmo_run.backends.harbor import HarborBackend
    from osmo_run.run.settings import BackendContext, BackendFactory
    from osmo_run.run.spec import HarborSpec, RunSpec


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
    """A one-row dataset holding the task's own instruction, in the temporary directory."""
    from osmo_run.errors import TaskDirError

    instruction = task_dir / "instruction.md"
    try:
        text = instruction.read_text(encoding="utf-8")
    except OSError:
        raise TaskDirError(f"{instruction}: cannot read the task's instruction") from None
    path = Path(tempfile.gettempdir()) / "osmo-run-instructions" / f"{task_dir.name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {"id": task_dir.name, "prompt": text}
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return path


def _identity(harbor: HarborSpec) -> dict[str, Any]:
    """The harbor settings that define a run's results (they enter its run id)."""
    return {
        "harbor_task_dir": str(harbor.task_dir),
        "harbor_tasks_root": str(harbor.tasks_root),
        "harbor_env": harbor.environment_import_path or harbor.env,
        "harbor_env_kwargs": harbor.environment_kwargs,
    }


def _backend_factory(spec: RunSpec, environment: Any, user_code_dir: Path | None) -> BackendFactory:
    """Makes the run's HarborBackend once the run knows its paths and endpoints;
    ``environment`` is Harbor's ``EnvironmentConfig`` (harbor is imported in backends only)."""
    from osmo_run.backends.harbor import HarborBackend
    from osmo_run.backends.harbor.requirements import RequirementOptions
    from osmo_run.run.runlock import lock_path

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
            preflight_timeout_sec=task.preflight_timeout_sec,
            run_id=context.run_id,
            llm=context.llm,
            llm_api_key_env=spec.llm.api_key_env if spec.llm else None,
            judge=context.judge,
            judge_api_key_env=spec.judge.api_key_env if spec.judge else None,
            requirements=requirements,
            run_lock=lock_path(context.paths),
        )

    return make_backend


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
    task_dir: Annotated[
        Path | None, typer.Option(help="Harbor task directory every row runs in.")
    ] = None,
    tasks_root: Annotated[
        Path | None,
        typer.Option(help="Directory that rows' metadata.harbor_task names resolve under."),
    ] = None,
    env: Annotated[
        str | None, typer.Option(help="Harbor environment type: docker (default), daytona, ...")
    ] = None,
    env_kwarg: Annotated[
        list[str] | None,
        typer.Option("--env-kwarg", help="Harbor environment option KEY=VALUE (repeatable)."),
    ] = None,
    environment_import_path: Annotated[
        str | None, typer.Option(help="A custom Harbor environment class as module:Class.")
    ] = None,
    user_code_dir: Annotated[
        Path | None,
        typer.Option(
            help="Directory copied into each trial and imported from [default: --code-dir, "
            "else the spec's code_dir, else the working directory]."
        ),
    ] = None,
    prebuild: Annotated[
        bool | None,
        typer.Option(
            "--prebuild/--no-prebuild",
            help="Build the trial image once per run (docker) [default: on].",
        ),
    ] = None,
    keep_trials: Annotated[
        bool | None,
        typer.Option(
            "--keep-trials/--no-keep-trials",
            help="Keep trial directories of successful rows too (failed ones are always kept).",
        ),
    ] = None,
    trials_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where trial directories go [default: the spec's harbor.trials_dir, else "
            "trials/ in the run directory]."
        ),
    ] = None,
    preflight_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds the one-call check of a remote environment waits [default: 30]."
        ),
    ] = None,
    run: RunFlags,
    ci: CIFlags,
) -> None:
    """Run every row in its own Harbor trial (HarborBackend): isolation per row."""
    from osmo_run.errors import InputError
    from osmo_run.run.overrides import HarborOverrides

    overrides = HarborOverrides(
        task_dir=task_dir,
        tasks_root=tasks_root,
        env=env,
        environment_import_path=environment_import_path,
        environment_kwargs=_env_kwargs(env_kwarg or []) or None,
        prebuild=prebuild,
        keep_trials=keep_trials,
        trials_dir=trials_dir,
        preflight_timeout_sec=preflight_timeout,
    )
    spec = load_run_spec(run, harbor=overrides, seed=ci.seed)
    task = spec.harbor
    if task.task_dir is None and task.tasks_root is None:
        raise InputError("give --task-dir DIR (or harbor.task_dir in the spec)")
    if dataset is None and task.task_dir is None:
        raise InputError("without a dataset, --task-dir names the task whose instruction runs")
    from osmo_run.backends.harbor import environment_config

    environment = environment_config(
        task.env, task.environment_import_path, task.environment_kwargs
    )
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

    launch(settings, _backend_factory(spec, environment, user_code_dir))
