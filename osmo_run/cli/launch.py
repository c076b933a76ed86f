"""The body every run command shares: flags into a spec and settings, then the run.

Each command parses only its own flags, builds its backend factory, and calls
:func:`launch`; everything else a run needs comes from :class:`~osmo_run.cli.flags.RunFlags`
and :class:`~osmo_run.cli.flags.CIFlags` here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from osmo_run.cli.flags import CIFlags, RunFlags
from osmo_run.cli.options import check_display, console, gates_from_flags, retry_categories

if TYPE_CHECKING:
    from osmo_run.errors import SpecError
    from osmo_run.run.configuring.overrides import HarborOverrides
    from osmo_run.run.configuring.spec import RunSpec
    from osmo_run.run.executing.settings import BackendFactory, RunSettings


def load_run_spec(
    run: RunFlags,
    isolation: str | None = None,
    harbor: HarborOverrides | None = None,
    seed: int | None = None,
) -> RunSpec:
    """The spec ``--spec`` names (or an empty one) with the flags that set its fields laid
    over it (``seed``: the CI group's ``--seed``); puts its code dir first on ``sys.path``.
    Sets ``--env-file``'s variables first, so that the spec's ``api_key_env`` checks find
    them. Raises :class:`~osmo_run.errors.SpecError` naming every invalid field, and
    :class:`~osmo_run.errors.EnvFileError` for an env file that does not parse."""
    from osmo_run.errors import SpecError
    from osmo_run.run.configuring.envfile import apply_env_file
    from osmo_run.run.configuring.overrides import (
        HarborOverrides,
        SpecOverrides,
        spec_with_overrides,
    )
    from osmo_run.sdk.imports import ensure_on_path

    check_display(run.display)
    if run.no_breaker and run.breaker is not None:
        raise SpecError(
            f"--breaker {run.breaker} sets when the breaker stops a run and --no-breaker turns "
            "it off; pass one of them"
        )
    if run.env_file is not None:
        apply_env_file(run.env_file)
    overrides = SpecOverrides(
        workflow=run.workflow,
        grader=run.grader,
        code_dir=run.code_dir,
        output=run.output,
        concurrency=run.concurrency,
        limit=run.limit,
        bad_rows=run.bad_rows,
        samples_per_row=run.samples,
        shard=run.shard,
        rows=run.rows,
        shuffle=run.shuffle,
        seed=seed,
        isolation=isolation,
        agent_sec=run.agent_timeout,
        grader_sec=run.grader_timeout,
        breaker=False if run.no_breaker else run.breaker,
        dataset_format=run.dataset_format,
        budget_tokens=run.budget_tokens,
        budget_usd=run.budget_usd,
        harbor=harbor or HarborOverrides(),
    )
    try:
        spec = spec_with_overrides(run.spec, overrides)
    except SpecError as exc:
        raise SpecError(_every_spec_problem(exc, run, harbor is not None)) from None
    ensure_on_path(spec.code_dir or Path.cwd())
    return spec


def _every_spec_problem(exc: SpecError, run: RunFlags, harbor: bool) -> str:
    """``exc``'s lines and every further problem ``osmo-run validate`` finds in the spec
    file once its invalid fields are set aside (imports, configs, the llm key), with the
    command line's workflow, grader, code dir and concurrency laid over it."""
    from osmo_run.run.executing.validate import problems_beyond_fields

    lines = str(exc).splitlines()
    if run.spec is None:
        return str(exc)
    flags = {
        "workflow": run.workflow,
        "grader": run.grader,
        "code_dir": run.code_dir,
        "concurrency": run.concurrency,
    }
    updates = {field: value for field, value in flags.items() if value is not None}
    extra = problems_beyond_fields(run.spec, harbor, updates)
    return "\n".join(lines + [problem for problem in extra if problem not in lines])


def run_settings(
    dataset: Path,
    spec: RunSpec,
    run: RunFlags,
    ci: CIFlags,
    *,
    backend_name: str,
    description: str,
    backend_identity: dict[str, Any] | None = None,
    info: dict[str, Any] | None = None,
) -> RunSettings:
    """The settings of one run from the shared flags; ``backend_identity`` holds the
    backend's result-defining settings, ``info`` its informational ones."""
    from osmo_run.run.configuring.envfile import env_file_secrets
    from osmo_run.run.executing.settings import RunSettings

    return RunSettings(
        dataset=dataset,
        spec=spec,
        output=spec.output,
        display="plain" if run.plain else run.display,
        overwrite=run.overwrite,
        resume=run.resume,
        retry_errors=retry_categories(run.retry_errors),
        description=description,
        backend_name=backend_name,
        backend_identity=backend_identity or {},
        info=info or {},
        gates=gates_from_flags(ci.fail_under, ci.min_pass_rate, ci.max_errors, ci.max_error_rate),
        junit_xml=ci.junit_xml,
        summary_md=ci.summary_md,
        json_summary=ci.json_summary,
        smoke_rows=ci.smoke_rows if ci.smoke else None,
        seed=spec.seed,
        fail_fast=ci.fail_fast,
        env_secrets=env_file_secrets(run.env_file),
        spec_file=run.spec,
        env_file=run.env_file,
    )


def launch(settings: RunSettings, make_backend: BackendFactory) -> NoReturn:
    """Run and leave with the run's exit code (the console is stderr under ``--json``)."""
    from osmo_run.run.executing.session import execute_run

    code = execute_run(settings, make_backend, console(stderr=settings.json_summary))
    raise typer.Exit(int(code))
