"""``osmo-run serve``: rollouts for a trainer over osmosis-ai's rollout protocol."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from osmo_run.cli.flags import HarborFlags, takes_flag_groups
from osmo_run.cli.options import EnvFileOption

if TYPE_CHECKING:
    from osmo_run.backends.base import ExecutionBackend
    from osmo_run.run.configuring.spec import RunSpec
    from osmo_run.sdk.context import LLMEndpoint
    from osmo_run.sdk.model_layer import ModelLayer

DEFAULT_QUEUE_FACTOR = 4
"""``--max-queued`` defaults to this many times the concurrency."""


BACKENDS = ("local", "harbor")


@takes_flag_groups
def serve(
    *,
    spec: Annotated[Path | None, typer.Option("--spec", "-s", help="YAML run spec.")] = None,
    workflow: Annotated[
        str | None, typer.Option(help="Workflow as module:Class (overrides the spec).")
    ] = None,
    grader: Annotated[
        str | None, typer.Option(help="Grader as module:Class (overrides the spec).")
    ] = None,
    code_dir: Annotated[
        Path | None, typer.Option(help="Directory the workflow's package imports from.")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free).")] = 8080,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Results JSONL [default: the spec's output, else "
            "runs/serve-<hash>/results.jsonl, <hash> of the spec and workflow].",
        ),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", min=1, help="Rollouts in flight.")
    ] = None,
    max_queued: Annotated[
        int | None,
        typer.Option(
            min=1,
            help=f"Rollouts admitted beyond those in flight; more answer 429 "
            f"[default: {DEFAULT_QUEUE_FACTOR} × the concurrency].",
        ),
    ] = None,
    backend_name: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="local (in this process, or --isolation process) or harbor (each rollout "
            "in its own Harbor trial, the harbor flags below) [default: harbor when "
            "--task-dir or --tasks-root is given, else local; a spec's harbor: section "
            "alone does not switch].",
        ),
    ] = None,
    isolation: Annotated[
        str | None,
        typer.Option(help="none (default) or process: each rollout in a child (local only)."),
    ] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            "--api-key-env",
            "--auth-token-env",
            help="Environment variable holding the server key: every route then needs "
            "Authorization: Bearer <key>. Required to listen beyond 127.0.0.1.",
        ),
    ] = None,
    display: Annotated[str, typer.Option(help="auto, live, plain or none.")] = "auto",
    resume: Annotated[
        bool,
        typer.Option(help="Serve again the results --output holds (their tokens stay valid)."),
    ] = False,
    overwrite: Annotated[bool, typer.Option(help="Start afresh over an earlier run.")] = False,
    agent_timeout: Annotated[
        float | None, typer.Option(help="Workflow deadline when a request gives none, seconds.")
    ] = None,
    grader_timeout: Annotated[
        float | None, typer.Option(help="Grader deadline when a request gives none, seconds.")
    ] = None,
    result_wait: Annotated[
        float, typer.Option(min=0.01, help="Seconds a result read waits for a change.")
    ] = 30.0,
    lease_timeout: Annotated[
        float,
        typer.Option(min=0.02, help="Seconds a lease lasts unread (more than --result-wait)."),
    ] = 120.0,
    shutdown_grace: Annotated[
        float, typer.Option(min=0, help="Seconds rollouts in flight get on SIGTERM/Ctrl-C.")
    ] = 10.0,
    breaker: Annotated[
        int | None,
        typer.Option(min=1, help="Refuse submissions (503) after K alike systemic failures."),
    ] = None,
    no_breaker: Annotated[bool, typer.Option("--no-breaker", help="No breaker.")] = False,
    env_file: EnvFileOption = None,
    trials: HarborFlags,
) -> None:
    """Serve rollouts to a trainer over osmosis-ai's rollout protocol (POST /rollout,
    long-polled results): the same workflows, graders, retries, breaker and results file
    as `osmo-run local` / `osmo-run harbor`, rows arriving over HTTP. --backend harbor (or
    --task-dir) runs each rollout in its own Harbor trial, reaching its request's model
    endpoint (a loopback one through a relay) with its request's key."""
    from osmo_run.cli.flags import RunFlags
    from osmo_run.cli.launch import load_run_spec
    from osmo_run.cli.options import check_display, console
    from osmo_run.errors import InputError
    from osmo_run.run.configuring.envfile import env_file_secrets
    from osmo_run.run.controls.breaker import Breaker
    from osmo_run.run.executing.display import PlainDisplay, make_display
    from osmo_run.run.executing.session import seed_budget
    from osmo_run.serve.rollouts import DEFAULT_MODEL_NAME, ServeSettings
    from osmo_run.serve.session import (
        ServedPlainDisplay,
        ServeOptions,
        ServeRun,
        check_binding,
        existing_results,
        run_serving,
    )

    check_display(display)
    if not all(importlib.util.find_spec(name) for name in ("uvicorn", "starlette")):
        raise InputError("osmo-run serve needs starlette and uvicorn: pip install osmo-run[serve]")
    if lease_timeout <= result_wait:
        raise InputError("--lease-timeout must be longer than --result-wait")
    flags = RunFlags(
        spec=spec,
        workflow=workflow,
        grader=grader,
        code_dir=code_dir,
        output=output,
        concurrency=concurrency,
        agent_timeout=agent_timeout,
        grader_timeout=grader_timeout,
        breaker=breaker,
        no_breaker=no_breaker,
        env_file=env_file,
        display=display,
    )
    harbor = _wants_harbor(backend_name, trials, isolation)
    if harbor:
        from osmo_run.cli.harbor import harbor_overrides

        run_spec = load_run_spec(flags, harbor=harbor_overrides(trials))
    else:
        run_spec = load_run_spec(flags, isolation=isolation)
    if run_spec.judge is not None and run_spec.judge.embedded:
        raise InputError(
            "judge: embedded is not started by osmo-run serve yet; give the judge a base_url "
            "(each rollout's own model comes from its request)"
        )
    api_key = _server_key(api_key_env)
    check_binding(host, api_key)
    results = run_spec.output or _default_output(spec, run_spec.workflow)
    from osmo_run.run.writing.runfiles import RunPaths
    from osmo_run.run.writing.runlock import run_locked

    # One live invocation per run, taken before the results are read or removed: a second
    # server on the same --output (with --resume or --overwrite too) is refused in one line.
    # Harbor trials' containers carry the lock file: no other run's sweep and no
    # `osmo-run cleanup` takes them for a killed run's while it is held.
    with run_locked(RunPaths(results), "serving run"):
        first_index = existing_results(results, resume, overwrite)
        llm = run_spec.llm.endpoint() if run_spec.llm is not None else None
        judge = run_spec.judge.endpoint() if run_spec.judge is not None else None
        secrets = tuple(
            key for key in (llm and llm.api_key, judge and judge.api_key) if key
        ) + env_file_secrets(env_file)
        parallel = run_spec.build_workflow_config().concurrency.max_concurrent
        _check_budget_is_counted(run_spec, harbor)
        if harbor:
            backend = _harbor_backend(run_spec, trials, results, llm, judge, secrets)
        else:
            backend = _local_backend(run_spec, results, llm, judge)
        settings = ServeSettings(
            max_queued=max_queued or DEFAULT_QUEUE_FACTOR * parallel,
            result_wait_sec=result_wait,
            lease_sec=lease_timeout,
            model_name=(run_spec.llm.model if run_spec.llm else None) or DEFAULT_MODEL_NAME,
            agent_timeout_sec=run_spec.timeouts.agent_sec,
            grader_timeout_sec=run_spec.timeouts.grader_sec,
            capture_tokens=run_spec.llm is not None and run_spec.llm.capture == "tokens",
        )
        out = console(stderr=True)
        shown = make_display(display, out)
        if isinstance(shown, PlainDisplay):
            shown = ServedPlainDisplay(out.file)
        serving = ServeRun(
            backend,
            results,
            settings,
            ServeOptions(host=host, port=port, api_key=api_key, shutdown_grace_sec=shutdown_grace),
            shown,
            secrets=secrets,
            retry=run_spec.retries.policy(),
            breaker=None if run_spec.breaker is None else Breaker(run_spec.breaker),
            first_index=first_index,
            layer=_model_layer(run_spec, parallel, judge),
        )
        finished, again = serving.restore(results) if resume else (0, 0)
        if serving.layer is not None and serving.layer.budget is not None:
            seed_budget(
                serving.layer.budget, run_spec, serving.kept_usage, serving.kept_grader_usage
            )
        kept = f" · {finished} results kept, {again} rollouts queued again" if resume else ""
        trial = f" · harbor trials, env {run_spec.harbor.env}" if harbor else ""
        shown.start(
            again,
            f"osmo-run serve{trial} · concurrency {parallel} · queue {settings.max_queued} · "
            f"output {results}{kept}",
        )
        code = run_serving(serving)
        raise typer.Exit(int(code))


def _check_budget_is_counted(spec: RunSpec, harbor: bool) -> None:
    """Refuse, in one line, a budget the server could not hold (it fails closed, never
    open): a request's endpoint may be anywhere, and rollouts in Harbor trials or child
    processes call endpoints not on this machine directly, past this process."""
    from osmo_run.errors import SpecError
    from osmo_run.run.executing.session import run_budget

    if not run_budget(spec).limited:
        return
    where = (
        "Harbor trials"
        if harbor
        else "child processes (isolation: process)"
        if spec.isolation == "process"
        else None
    )
    if where is not None:
        raise SpecError(
            f"budget: osmo-run serve cannot count the model calls of rollouts in {where} "
            "(a request's endpoint may be anywhere, and they call it directly); remove "
            "budget or serve with the local backend and isolation: none"
        )


def _model_layer(spec: RunSpec, concurrency: int, judge: LLMEndpoint | None) -> ModelLayer:
    """The layer every served rollout's model calls go through: an adaptive limit per
    endpoint under ``concurrency`` (the spec's ``llm.max_concurrency`` fixes each rollout
    endpoint's, ``judge.max_concurrency`` the judge's) and the spec's budget."""
    from osmo_run.run.executing.session import run_budget
    from osmo_run.sdk.model_layer import ModelLayer
    from osmo_run.sdk.model_limits import ModelLimits

    fixed = None if spec.llm is None else spec.llm.max_concurrency
    limits = ModelLimits(concurrency, fixed_default=fixed)
    if judge is not None and spec.judge is not None:
        limits.fix(judge.base_url, spec.judge.max_concurrency)
    return ModelLayer(limits, run_budget(spec))


def _wants_harbor(backend: str | None, trials: HarborFlags, isolation: str | None) -> bool:
    """Whether rollouts run in Harbor trials: ``--backend``, else whether a flag naming
    the task (``--task-dir``, ``--tasks-root``) is given. A harbor flag with the local
    backend, or ``--isolation`` with Harbor, is refused in one line."""
    from osmo_run.errors import InputError

    if backend is not None and backend not in BACKENDS:
        raise InputError(f"--backend: {backend!r} is not one of {', '.join(BACKENDS)}")
    given = trials.given()
    harbor = (
        backend == "harbor"
        if backend is not None
        else trials.task_dir is not None or trials.tasks_root is not None
    )
    if not harbor and given:
        raise InputError(
            f"{' '.join(given)}: harbor flags, for rollouts in Harbor trials; add "
            "--backend harbor with --task-dir DIR (or drop them to serve locally)"
        )
    if harbor and isolation is not None:
        raise InputError(
            "--isolation is for the local backend; a Harbor trial isolates each rollout already"
        )
    return harbor


def _local_backend(
    spec: RunSpec, results: Path, llm: LLMEndpoint | None, judge: LLMEndpoint | None
) -> ExecutionBackend:
    """The rollouts in this process (or in a child each, ``isolation: process``)."""
    from osmo_run.backends.local import LocalBackend

    return LocalBackend(
        spec.workflow,
        spec.build_workflow_config(),
        spec.grader,
        spec.build_grader_config(),
        llm=llm,
        judge=judge,
        artifacts_root=results.parent / "artifacts",
        isolation=spec.isolation,
        code_dir=spec.code_dir or Path.cwd(),
    )


def _harbor_backend(
    spec: RunSpec,
    trials: HarborFlags,
    results: Path,
    llm: LLMEndpoint | None,
    judge: LLMEndpoint | None,
    secrets: tuple[str, ...],
) -> ExecutionBackend:
    """Each rollout in its own Harbor trial, made as ``osmo-run harbor`` makes it; the run
    id (the trials' container label) is the results file's, so a restart (``--resume``)
    removes what a killed invocation left."""
    from osmo_run.cli.harbor import harbor_backend_factory
    from osmo_run.run.executing.settings import BackendContext
    from osmo_run.run.writing.runfiles import RunPaths

    make_backend = harbor_backend_factory(spec, trials, None)
    run_id = "serve-" + hashlib.sha256(str(results.resolve()).encode()).hexdigest()[:12]
    context = BackendContext(RunPaths(results), run_id, llm, judge, secrets)
    return make_backend(context)


def _server_key(name: str | None) -> str | None:
    """The server key from the environment variable ``name``; one line when it is unset."""
    from osmo_run.errors import InputError

    if name is None:
        return None
    value = os.environ.get(name, "")
    if not value.strip():
        raise InputError(f"--api-key-env {name}: the variable is unset or empty")
    return value


def _default_output(spec: Path | None, workflow: object) -> Path:
    """``runs/serve-<hash>/results.jsonl``: the same spec and workflow find the same run."""
    digest = hashlib.sha256()
    if spec is not None and spec.is_file():
        digest.update(spec.read_bytes())
    digest.update(repr(workflow).encode())
    return Path("runs") / f"serve-{digest.hexdigest()[:10]}" / "results.jsonl"
