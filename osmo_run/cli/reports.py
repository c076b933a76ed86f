"""``osmo-run report`` and ``osmo-run regrade``: work on a run's files, run no workflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmo_run.cli.options import EnvFileOption, OverwriteOption, console

if TYPE_CHECKING:
    from osmo_run.run.configuring.spec import RunSpec


def report(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="A run directory or results file. Two runs: compare them row by row. "
            "Shards of one run (--shard K/N): merge them into one summary."
        ),
    ],
    fail_on_regression: Annotated[
        bool,
        typer.Option(
            "--fail-on-regression",
            help="With two runs A (the baseline) and B: exit 1 when B is worse than A by "
            "more than --max-regression and a paired test over the rows in both tells "
            "the drop from noise at --regression-alpha.",
        ),
    ] = False,
    regression_alpha: Annotated[
        float,
        typer.Option(help="Significance level of the regression gate (one-sided)."),
    ] = 0.05,
    max_regression: Annotated[
        float,
        typer.Option(help="Drop tolerated by the regression gate (0.02: two points)."),
    ] = 0.0,
    regression_metric: Annotated[
        str,
        typer.Option(
            help="What the regression gate compares: pass (pass rate, exact McNemar) or "
            "reward (mean reward, no reward = 0, paired sign-flip test)."
        ),
    ] = "pass",
    junit_xml: Annotated[
        Path | None,
        typer.Option("--junit-xml", help="With --fail-on-regression: write the gate as JUnit XML."),
    ] = None,
) -> None:
    """Print the summary of a finished, partial or crashed run from its files alone; with
    two runs, compare them (with paired significance tests) and, with
    --fail-on-regression, gate B on A."""
    from osmo_run.errors import InputError
    from osmo_run.run.executing.finish import exit_code_for
    from osmo_run.run.reporting.report import (
        LoadedRun,
        check_shards,
        compare,
        render_comparison,
        render_report,
        summarize,
    )
    from osmo_run.run.reporting.summary import with_not_run

    gate_flags = fail_on_regression or junit_xml is not None
    if gate_flags and len(runs) != 2:
        raise InputError("--fail-on-regression and --junit-xml take two runs: A (baseline) and B")
    if junit_xml is not None and not fail_on_regression:
        raise InputError("--junit-xml here writes the regression gate: add --fail-on-regression")
    if not 0.0 < regression_alpha < 1.0:
        raise InputError(f"--regression-alpha {regression_alpha:g}: give a level between 0 and 1")
    if not 0.0 <= max_regression <= 1.0:
        raise InputError(f"--max-regression {max_regression:g}: give a drop from 0 to 1")
    if regression_metric not in ("pass", "reward"):
        raise InputError(f"--regression-metric {regression_metric!r}: give pass or reward")
    loaded = [LoadedRun.load(path) for path in runs]
    out = console()
    shards = [run.manifest.defining.get("shard") if run.manifest else None for run in loaded]
    if len(loaded) == 1 or (all(shards) and not fail_on_regression):
        missing = check_shards(loaded) if all(shards) else []  # one shard: the others
        summary, count, expected = summarize(loaded)
        out.print(render_report(summary, count, expected, missing, loaded))
        if expected is not None and count < expected:  # judged on every row, as the run is
            summary = with_not_run(summary, expected - count)
        raise typer.Exit(int(exit_code_for(summary)))
    if len(loaded) != 2:
        raise InputError("report takes one run, two runs to compare, or the shards of one run")
    first, second = loaded
    threshold = float((first.manifest.info if first.manifest else {}).get("pass_threshold", 1.0))
    diff = compare(first, second, threshold)
    out.print(render_comparison(first, second, diff))
    if not fail_on_regression or diff.significance is None:
        return
    from osmo_run.run.reporting.ci_reports import append_step_summary
    from osmo_run.run.reporting.paired import regression_gate
    from osmo_run.run.reporting.report import gate_junit, gate_markdown

    significance = diff.significance
    result = significance.passing if regression_metric == "pass" else significance.reward
    verdict = regression_gate(result, regression_alpha, max_regression, diff.only_a)
    out.print(verdict.line(), style="red" if verdict.failed else "green", highlight=False)
    if junit_xml is not None:
        gate_junit(verdict, first, second, junit_xml)
    append_step_summary(gate_markdown(verdict, diff, first, second))
    raise typer.Exit(1 if verdict.failed else 0)


def regrade(
    run: Annotated[Path, typer.Argument(help="The run directory or results file to regrade.")],
    grader: Annotated[
        str | None,
        typer.Option(help="Grader as module:Class [default: the run's own grader]."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Results file [default: <run dir>-regrade-<hash>/results.jsonl]."
        ),
    ] = None,
    overwrite: OverwriteOption = False,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1)] = 8,
    code_dir: Annotated[
        Path | None,
        typer.Option(
            help="Directory the grader's package imports from [default: --spec's code_dir, "
            "else the run's own code dir (its manifest), else the working directory]."
        ),
    ] = None,
    grader_settings: Annotated[
        str | None,
        typer.Option(
            help="The grader's settings as a JSON object [default: those of the grader chosen]."
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(
            help="A run spec whose grader, grader_config and judge section regrade "
            "(--grader and --grader-settings win)."
        ),
    ] = None,
    env_file: EnvFileOption = None,
) -> None:
    """Grade a run's saved samples again (no workflow reruns) into a new run directory."""
    from osmo_run.run.configuring.envfile import apply_env_file, env_file_secrets
    from osmo_run.run.configuring.spec_file import load_spec
    from osmo_run.run.executing.finish import exit_code_for
    from osmo_run.run.executing.regrade import choose_grader, judge_endpoint
    from osmo_run.run.executing.regrade import regrade as regrade_run
    from osmo_run.run.reporting.report import LoadedRun
    from osmo_run.run.reporting.summary_text import render_summary
    from osmo_run.sdk.imports import ensure_on_path

    if env_file is not None:
        apply_env_file(env_file)  # before the judge section reads its api_key_env
    loaded = LoadedRun.load(run)
    run_spec = load_spec(spec) if spec is not None else None
    recorded = loaded.manifest.info.get("code_dir") if loaded.manifest else None
    spec_code = run_spec.code_dir if run_spec is not None else None
    ensure_on_path(code_dir or spec_code or (Path(recorded) if recorded else Path.cwd()))
    settings = _settings_json(grader_settings)
    name, settings = choose_grader(loaded, grader, settings, run_spec)
    with judge_endpoint(run_spec, loaded.paths.directory) as judge:
        inputs = (("the spec", spec), ("the env file", env_file))
        summary, _ = regrade_run(
            loaded,
            name,
            settings,
            output,
            overwrite,
            concurrency,
            judge=judge,
            inputs=inputs,
            secrets=env_file_secrets(env_file),
            judge_max_concurrency=_judge_max_concurrency(run_spec),
        )
    console().print(render_summary(summary))
    raise typer.Exit(int(exit_code_for(summary)))


def _judge_max_concurrency(spec: RunSpec | None) -> int | None:
    """The spec's ``judge.max_concurrency`` (``None``: adaptive)."""
    judge = None if spec is None else spec.judge
    return None if judge is None else judge.max_concurrency


def _settings_json(text: str | None) -> dict[str, Any] | None:
    """``--grader-settings``: a JSON object; :class:`InputError` naming the flag otherwise."""
    from osmo_run.errors import InputError

    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--grader-settings: not JSON ({exc}); pass an object") from None
    if not isinstance(value, dict):
        raise InputError(
            f"--grader-settings: must be a JSON object of settings, got {type(value).__name__}"
        )
    return value
