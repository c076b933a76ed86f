"""``osmo-run local``: every row in this process."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from osmo_run.cli.flags import CIFlags, RunFlags, takes_flag_groups
from osmo_run.cli.launch import launch, load_run_spec, run_settings

if TYPE_CHECKING:
    from osmo_run.backends.local import LocalBackend
    from osmo_run.run.executing.settings import BackendContext


@takes_flag_groups
def local(
    *,
    dataset: Annotated[Path, typer.Argument(help="Dataset: JSONL, CSV or Parquet (by extension).")],
    run: RunFlags,
    isolation: Annotated[
        str | None,
        typer.Option(
            help="none (default) or process: each row in a child process, killed at its "
            "deadline even when it blocks."
        ),
    ] = None,
    ci: CIFlags,
) -> None:
    """Run every row in this process (LocalBackend): the shortest debugging loop."""
    from osmo_run.backends.local import LocalBackend

    spec = load_run_spec(run, isolation=isolation, seed=ci.seed)
    settings = run_settings(
        dataset, spec, run, ci, backend_name="local", description=f"osmo-run local {dataset}"
    )

    def make_backend(context: BackendContext) -> LocalBackend:
        return LocalBackend(
            spec.workflow,
            spec.build_workflow_config(),
            spec.grader,
            spec.build_grader_config(),
            llm=context.llm,
            judge=context.judge,
            artifacts_root=context.paths.artifacts,
            isolation=spec.isolation,
            code_dir=spec.code_dir or Path.cwd(),
        )

    launch(settings, make_backend)
