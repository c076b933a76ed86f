"""``osmo-run harbor``: every row in its own Harbor trial environment."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from osmo_run.cli.options import (
    AgentTimeoutOption,
    BadRowsOption,
    CodeDirOption,
    ConcurrencyOption,
    DisplayOption,
    FailFastOption,
    FailUnderOption,
    GraderOption,
    GraderTimeoutOption,
    JsonOption,
    JunitOption,
    LimitOption,
    MaxErrorRateOption,
    MaxErrorsOption,
    MinPassRateOption,
    OutputOption,
    OverwriteOption,
    PlainOption,
    ResumeOption,
    RetryErrorsOption,
    SamplesOption,
    SeedOption,
    ShardOption,
    SmokeOption,
    SmokeRowsOption,
    SpecOption,
    SummaryMdOption,
    WorkflowOption,
    check_display,
    ci_settings,
    console,
    load_spec_with_flags,
    retry_categories,
)


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


def harbor(
    dataset: Annotated[
        Path | None,
        typer.Argument(help="JSONL dataset; without one, the task's instruction is the only row."),
    ] = None,
    task_dir: Annotated[
        Path | None, typer.Option(help="Harbor task directory every row runs in.")
    ] = None,
    tasks_root: Annotated[
        Path | None,
        typer.Option(help="Directory that rows' metadata.harbor_task names resolve under."),
    ] = None,
    spec: SpecOption = None,
    workflow: WorkflowOption = None,
    grader: GraderOption = None,
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
            help="Directory copied into each trial and imported from [default: code dir]."
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
        Path | None, typer.Option(help="Where trial directories go [default: beside the output].")
    ] = None,
    output: OutputOption = None,
    overwrite: OverwriteOption = False,
    concurrency: ConcurrencyOption = None,
    limit: LimitOption = None,
    agent_timeout: AgentTimeoutOption = None,
    grader_timeout: GraderTimeoutOption = None,
    bad_rows: BadRowsOption = None,
    code_dir: CodeDirOption = None,
    display: DisplayOption = "auto",
    resume: ResumeOption = False,
    retry_errors: RetryErrorsOption = None,
    samples: SamplesOption = None,
    shard: ShardOption = None,
    fail_under: FailUnderOption = None,
    min_pass_rate: MinPassRateOption = None,
    max_errors: MaxErrorsOption = None,
    max_error_rate: MaxErrorRateOption = None,
    junit_xml: JunitOption = None,
    summary_md: SummaryMdOption = None,
    json_summary: JsonOption = False,
    plain: PlainOption = False,
    smoke: SmokeOption = False,
    smoke_rows: SmokeRowsOption = 5,
    seed: SeedOption = 0,
    fail_fast: FailFastOption = False,
) -> None:
    """Run every row in its own Harbor trial (HarborBackend): isolation per row."""
    from osmo_run.errors import InputError
    from osmo_run.run.runfiles import RunPaths
    from osmo_run.run.session import RunSettings, execute_run
    from osmo_run.sdk._imports import ensure_on_path

    display = "plain" if plain else display
    check_display(display)
    run_spec = load_spec_with_flags(
        spec,
        workflow,
        grader,
        {
            "agent_sec": agent_timeout,
            "grader_sec": grader_timeout,
            "concurrency": concurrency,
            "limit": limit,
            "bad_rows": bad_rows,
            "code_dir": code_dir,
            "output": output,
            "samples_per_row": samples,
            "shard": shard,
            "harbor": {
                "task_dir": task_dir,
                "tasks_root": tasks_root,
                "env": env,
                "environment_import_path": environment_import_path,
                "environment_kwargs": _env_kwargs(env_kwarg or []) or None,
                "prebuild": prebuild,
                "keep_trials": keep_trials,
                "trials_dir": trials_dir,
            },
        },
    )
    settings_harbor = run_spec.harbor
    if settings_harbor.task_dir is None and settings_harbor.tasks_root is None:
        raise InputError("give --task-dir DIR (or harbor.task_dir in the spec)")
    if dataset is None and settings_harbor.task_dir is None:
        raise InputError("without a dataset, --task-dir names the task whose instruction runs")
    from osmo_run.backends.harbor import HarborBackend, environment_config

    code_root = run_spec.code_dir or Path.cwd()
    ensure_on_path(code_root)
    if dataset is None:
        assert settings_harbor.task_dir is not None
        dataset = _instruction_dataset(settings_harbor.task_dir)
    llm = run_spec.llm.endpoint() if run_spec.llm else None
    environment = environment_config(
        settings_harbor.env,
        settings_harbor.environment_import_path,
        settings_harbor.environment_kwargs,
    )
    settings = RunSettings(
        dataset=dataset,
        spec=run_spec,
        output=run_spec.output,
        display=display,
        overwrite=overwrite,
        resume=resume,
        retry_errors=retry_categories(retry_errors),
        **ci_settings(
            fail_under,
            min_pass_rate,
            max_errors,
            max_error_rate,
            junit_xml,
            summary_md,
            json_summary,
            smoke,
            smoke_rows,
            seed,
            fail_fast,
        ),
        description=f"osmo-run harbor {dataset} · env {settings_harbor.env}",
        llm=llm,  # for `llm: embedded`, the run sets it to the server it starts
        backend_name="harbor",
        backend_identity={
            "harbor_task_dir": str(settings_harbor.task_dir),
            "harbor_tasks_root": str(settings_harbor.tasks_root),
            "harbor_env": settings_harbor.environment_import_path or settings_harbor.env,
            "harbor_env_kwargs": settings_harbor.environment_kwargs,
        },
        info={"prebuild": settings_harbor.prebuild, "keep_trials": settings_harbor.keep_trials},
    )

    def make_backend(paths: RunPaths, run_id: str) -> HarborBackend:
        return HarborBackend(
            task_dir=settings_harbor.task_dir,
            tasks_root=settings_harbor.tasks_root,
            user_code_dir=user_code_dir or code_root,
            workflow=run_spec.workflow,
            workflow_config=run_spec.agent_workflow_config(),
            grader=run_spec.grader,
            grader_config=run_spec.grader_config_object(),
            environment_config=environment,
            prebuild_local_image=settings_harbor.prebuild,
            cleanup_successful_trials=not settings_harbor.keep_trials,
            trials_dir=settings_harbor.trials_dir or paths.trials,
            run_id=run_id,
            llm=settings.llm,
            llm_api_key_env=run_spec.llm.api_key_env if run_spec.llm else None,
        )

    secrets = (llm.api_key,) if llm is not None and llm.api_key else ()
    code = execute_run(settings, make_backend, console(stderr=json_summary), secrets)
    raise typer.Exit(int(code))
