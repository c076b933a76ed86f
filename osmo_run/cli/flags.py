"""The flags every run command shares, as typed groups, and how a command takes a group.

``osmo-run local`` and ``osmo-run harbor`` declare ``run: RunFlags`` and ``ci: CIFlags``
parameters, ``osmo-run harbor`` and ``osmo-run serve`` ``trials: HarborFlags``;
:func:`takes_flag_groups` spells each group's fields out as the command's own options for
typer and hands the command one value per group.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from osmo_run.cli.options import EnvFileOption

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class RunFlags:
    """What to run and how: the spec, its overrides, the output, resuming, the display,
    the breaker."""

    spec: Annotated[Path | None, typer.Option("--spec", "-s", help="YAML run spec.")] = None
    workflow: Annotated[
        str | None, typer.Option(help="Workflow as module:Class (overrides the spec).")
    ] = None
    grader: Annotated[
        str | None, typer.Option(help="Grader as module:Class (overrides the spec).")
    ] = None
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Output JSONL [default: the spec's output, else runs/<dataset>-<hash>/"
            "results.jsonl, <hash> of what defines the results (workflow, grader, settings, "
            "the dataset's content...): the same run finds the same directory].",
        ),
    ] = None
    overwrite: Annotated[
        bool, typer.Option(help="Replace an output file that already holds results.")
    ] = False
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            "-c",
            min=1,
            help="Rows in flight [default: the spec's concurrency, else its "
            "workflow_config.concurrency.max_concurrent, else 4].",
        ),
    ] = None
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="Run only the first N rows.")
    ] = None
    agent_timeout: Annotated[
        float | None,
        typer.Option(
            help="Workflow deadline per row, seconds [default: the spec's timeouts.agent_sec, "
            "else 600]."
        ),
    ] = None
    grader_timeout: Annotated[
        float | None,
        typer.Option(
            help="Grader deadline per row, seconds [default: the spec's timeouts.grader_sec, "
            "else 120]."
        ),
    ] = None
    bad_rows: Annotated[
        str | None,
        typer.Option(
            help="stop: refuse a dataset with a bad line; record: record it, go on "
            "[default: the spec's bad_rows, else stop]."
        ),
    ] = None
    code_dir: Annotated[
        Path | None,
        typer.Option(
            help="Directory the workflow's package imports from [default: the spec's "
            "code_dir, else the working directory]."
        ),
    ] = None
    display: Annotated[str, typer.Option(help="auto, live, plain or none.")] = "auto"
    resume: Annotated[
        bool,
        typer.Option(help="Continue the run in --output: keep finished rows, run the rest."),
    ] = False
    retry_errors: Annotated[
        str | None,
        typer.Option(
            "--retry-errors",
            help="Rerun the run's failed rows; optionally only these categories, "
            "comma-separated (e.g. --retry-errors timeout,infra_error). Earlier attempts stay "
            "on record.",
        ),
    ] = None
    samples: Annotated[
        int | None,
        typer.Option(
            "--samples",
            min=1,
            help="Rollouts per row, for pass@k [default: the spec's samples_per_row, else 1].",
        ),
    ] = None
    shard: Annotated[
        str | None,
        typer.Option(help="K/N: run the rows whose index is K-1 modulo N (split across machines)."),
    ] = None
    plain: Annotated[bool, typer.Option("--plain", help="Same as --display plain.")] = False
    rows: Annotated[
        str | None,
        typer.Option(
            "--rows",
            help="Run only these rows: indexes from 0 and inclusive ranges, e.g. 3,7,10-20.",
        ),
    ] = None
    shuffle: Annotated[
        bool | None,
        typer.Option(
            "--shuffle/--no-shuffle",
            help="With --limit N: draw N rows at random (reproducible with --seed) instead of "
            "the first N; rows still run in file order.",
        ),
    ] = None
    dataset_format: Annotated[
        str | None,
        typer.Option(
            "--dataset-format",
            help="auto (default: by extension, .csv, .parquet/.pq, else JSONL), jsonl, csv "
            "or parquet.",
        ),
    ] = None
    env_file: EnvFileOption = None
    budget_tokens: Annotated[
        int | None,
        typer.Option(
            "--budget-tokens",
            min=1,
            help="Stop sending model calls once the run's calls used this many tokens "
            "(spec budget.tokens); rows that need one end as budget_exceeded, exit 6.",
        ),
    ] = None
    budget_usd: Annotated[
        float | None,
        typer.Option(
            "--budget-usd",
            help="Stop sending model calls once the run's calls cost this many dollars, by "
            "the spec's prices (spec budget.usd).",
        ),
    ] = None
    breaker: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Stop starting rows once K rollouts in a row failed with the same cause "
            "(infra_error, model_api_error, rate_limit) [default: the spec's, 5].",
        ),
    ] = None
    no_breaker: Annotated[
        bool,
        typer.Option(
            "--no-breaker", help="Never stop for failures that repeat (spec: breaker: off)."
        ),
    ] = False


@dataclass(frozen=True)
class CIFlags:
    """What a CI step needs: gates, error budgets, reports, smoke runs and fail-fast."""

    fail_under: Annotated[
        float | None,
        typer.Option(help="Gate: fail unless the mean reward (failed rows as 0) is at least X."),
    ] = None
    min_pass_rate: Annotated[
        float | None,
        typer.Option(help="Gate: fail unless this share of rollouts reaches the pass threshold."),
    ] = None
    max_errors: Annotated[
        list[str] | None,
        typer.Option(
            "--max-errors",
            help="Error budget: at most N failed rollouts, or CATEGORY=N for one category "
            "(repeatable).",
        ),
    ] = None
    max_error_rate: Annotated[
        list[str] | None,
        typer.Option(
            "--max-error-rate", help="Error budget as a fraction: F, or CATEGORY=F (repeatable)."
        ),
    ] = None
    junit_xml: Annotated[
        Path | None,
        typer.Option("--junit-xml", help="Write a JUnit XML report, a case per rollout."),
    ] = None
    summary_md: Annotated[
        Path | None,
        typer.Option(
            "--summary-md",
            help="Write a Markdown summary (also appended to $GITHUB_STEP_SUMMARY).",
        ),
    ] = None
    json_summary: Annotated[
        bool, typer.Option("--json", help="Print the final summary as one JSON object on stdout.")
    ] = False
    smoke: Annotated[
        bool,
        typer.Option(
            help="CI smoke test: a fixed random subset of rows (--smoke-rows, --seed), "
            "timeouts capped at 60 s, fail-fast."
        ),
    ] = False
    smoke_rows: Annotated[int, typer.Option(min=1, help="Rows in a --smoke run.")] = 5
    seed: Annotated[
        int | None, typer.Option(help="Seed choosing the --shuffle and --smoke rows [default: 0].")
    ] = None
    fail_fast: Annotated[
        bool, typer.Option(help="Start no further rows after the first failed rollout.")
    ] = False


@dataclass(frozen=True)
class HarborFlags:
    """Where and how Harbor trials run: the task, the environment, the code they get, what
    is kept. All but ``user_code_dir`` set fields of the spec's ``harbor:`` section
    (:func:`osmo_run.cli.harbor.harbor_overrides`)."""

    task_dir: Annotated[
        Path | None, typer.Option(help="Harbor task directory every row runs in.")
    ] = None
    tasks_root: Annotated[
        Path | None,
        typer.Option(help="Directory that rows' metadata.harbor_task names resolve under."),
    ] = None
    env: Annotated[
        str | None, typer.Option(help="Harbor environment type: docker (default), daytona, ...")
    ] = None
    env_kwarg: Annotated[
        list[str] | None,
        typer.Option("--env-kwarg", help="Harbor environment option KEY=VALUE (repeatable)."),
    ] = None
    environment_import_path: Annotated[
        str | None, typer.Option(help="A custom Harbor environment class as module:Class.")
    ] = None
    user_code_dir: Annotated[
        Path | None,
        typer.Option(
            help="Directory copied into each trial and imported from [default: --code-dir, "
            "else the spec's code_dir, else the working directory]."
        ),
    ] = None
    prebuild: Annotated[
        bool | None,
        typer.Option(
            "--prebuild/--no-prebuild",
            help="Build the trial image once per run (docker) [default: on].",
        ),
    ] = None
    keep_trials: Annotated[
        bool | None,
        typer.Option(
            "--keep-trials/--no-keep-trials",
            help="Keep trial directories of successful rows too (failed ones are always kept).",
        ),
    ] = None
    trials_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where trial directories go [default: the spec's harbor.trials_dir, else "
            "trials/ in the run directory]."
        ),
    ] = None
    preflight_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds the one-call check of a remote environment waits [default: 30]."
        ),
    ] = None

    def given(self) -> list[str]:
        """The flags given on the command line, as their options read (``--task-dir``)."""
        given = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None or value == []:
                continue
            name = field.name.replace("_", "-")
            given.append(f"--no-{name}" if value is False else f"--{name}")
        return given


FLAG_GROUPS: tuple[type, ...] = (RunFlags, CIFlags, HarborFlags)


def takes_flag_groups(command: F) -> F:
    """Let a typer command take flag groups (:data:`FLAG_GROUPS`) as single parameters.

    The returned function's signature lists each group's fields, in place of the group's
    parameter, as keyword parameters with the fields' typer annotations and defaults; when
    called, it gathers them back into one group value.
    """
    hints = typing.get_type_hints(command, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, type] = {}
    for parameter in inspect.signature(command).parameters.values():
        annotation = hints.get(parameter.name, parameter.annotation)
        if annotation in FLAG_GROUPS:
            groups[parameter.name] = annotation
            parameters += _group_parameters(annotation)
        else:
            # keyword-only, like the groups' fields: typer passes every value by name
            kind = inspect.Parameter.KEYWORD_ONLY
            parameters.append(parameter.replace(annotation=annotation, kind=kind))

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        for name, group in groups.items():
            fields = dataclasses.fields(group)
            kwargs[name] = group(**{f.name: kwargs.pop(f.name) for f in fields if f.name in kwargs})
        return command(**kwargs)

    wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    del wrapper.__wrapped__  # typer must read the new signature, not the command's
    return typing.cast(F, wrapper)


def _group_parameters(group: type) -> list[inspect.Parameter]:
    hints = typing.get_type_hints(group, include_extras=True)
    return [
        inspect.Parameter(
            field.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=field.default,
            annotation=hints[field.name],
        )
        for field in dataclasses.fields(group)
    ]
