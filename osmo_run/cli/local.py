"""``osmo-run local``: every row in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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


def local(
    dataset: Annotated[Path, typer.Argument(help="JSONL dataset, one row per line.")],
    spec: SpecOption = None,
    workflow: WorkflowOption = None,
    grader: GraderOption = None,
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
    isolation: Annotated[
        str | None,
        typer.Option(
            help="none (default) or process: each row in a child process, killed at its "
            "deadline even when it blocks."
        ),
    ] = None,
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
    """Run every row in this process (LocalBackend): the shortest debugging loop."""
    from osmo_run.backends.local import LocalBackend
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
            "isolation": isolation,
            "shard": shard,
        },
    )
    ensure_on_path(run_spec.code_dir or Path.cwd())
    llm = run_spec.llm.endpoint() if run_spec.llm else None
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
        description=f"osmo-run local {dataset}",
        llm=llm,  # for `llm: embedded`, the run sets it to the server it starts
    )

    def make_backend(paths: RunPaths, run_id: str) -> LocalBackend:
        return LocalBackend(
            run_spec.workflow,
            run_spec.agent_workflow_config(),
            run_spec.grader,
            run_spec.grader_config_object(),
            llm=settings.llm,
            artifacts_root=paths.artifacts,
            isolation=run_spec.isolation,
            code_dir=run_spec.code_dir or Path.cwd(),
        )

    secrets = (llm.api_key,) if llm is not None and llm.api_key else ()
    code = execute_run(settings, make_backend, console(stderr=json_summary), secrets)
    raise typer.Exit(int(code))
