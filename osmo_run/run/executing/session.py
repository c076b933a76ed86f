"""One run from the command line's point of view: settings in, exit code out.

Shared by ``osmo-run local`` and ``osmo-run harbor``, which differ only in the backend
factory they pass. The steps: :func:`~osmo_run.run.executing.plan.plan_run` (check the dataset, fix
rows, identity and paths), :func:`~osmo_run.run.executing.resume.prepare_run_dir` (what an earlier
invocation kept), the model server for ``llm: embedded``, the rows through the runner, then
:func:`~osmo_run.run.executing.finish.finish_run` (verdict, summary, reports).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys

from rich.console import Console

from osmo_run.backends.base import ExecutionBackend
from osmo_run.errors import ExitCode
from osmo_run.run.configuring.spec import RunSpec
from osmo_run.run.controls.breaker import Breaker
from osmo_run.run.controls.interrupts import interrupts_handled
from osmo_run.run.executing.display import Display, make_display
from osmo_run.run.executing.finish import (
    check_report_paths,
    exit_code_for,
    finish_run,
    write_summary,
)
from osmo_run.run.executing.gc_tuning import tuned_for_rollouts
from osmo_run.run.executing.plan import RunPlan, plan_run, with_model_server
from osmo_run.run.executing.resume import ResumeState, prepare_run_dir
from osmo_run.run.executing.runner import Runner, work_items
from osmo_run.run.executing.settings import BackendContext, BackendFactory, RunSettings
from osmo_run.run.reporting.summary import RunSummary, UsageSummary, with_not_run
from osmo_run.run.writing.manifest import write_manifest
from osmo_run.run.writing.output import OutputWriter, check_writable
from osmo_run.run.writing.runlock import run_locked
from osmo_run.sdk.model_budget import Price, RunBudget
from osmo_run.sdk.model_layer import ModelLayer, use_model_layer
from osmo_run.sdk.model_limits import ModelLimits
from osmo_run.sdk.rollout import run_to_completion
from osmo_run.sdk.types import LLMUsage

__all__ = ["ExitCode", "execute_run", "exit_code_for", "write_summary"]


def execute_run(settings: RunSettings, make_backend: BackendFactory, console: Console) -> ExitCode:
    """Plan the run, prepare its directory, run what is left to run, then write, print and
    judge the summary; return the exit code.

    With ``llm: embedded`` the model server starts once the run directory is ready and
    stops when this returns or raises (Ctrl-C included). Raises
    :class:`~osmo_run.errors.OsmoRunError` for bad input before anything runs.
    """
    plan = plan_run(settings)
    if not plan.paths.results.is_dir():  # a directory gets its own line from prepare_run_dir
        check_writable(plan.paths.results, "--output")  # named as the flag, before the lock
    with run_locked(plan.paths):  # one live invocation per run: held until the summary
        return _execute_locked(plan, make_backend, console)


def _execute_locked(plan: RunPlan, make_backend: BackendFactory, console: Console) -> ExitCode:
    """:func:`execute_run` once the run is this process's alone."""
    settings = plan.settings
    check_report_paths(plan)  # before any file changes: a report must not fail at the end
    state = prepare_run_dir(plan)
    if settings.display == "plain":  # no control codes, even on a terminal (or a CI pty)
        console = Console(file=console.file, highlight=False, color_system=None)
    with contextlib.ExitStack() as started:  # what the run starts, stopped when it ends
        plan = _start_model_server(plan, started)
        context = BackendContext(
            plan.paths, plan.manifest.run_id, plan.llm, plan.judge, plan.secrets
        )
        backend = make_backend(context)
        display = make_display(settings.display, console)
        # --json: stdout holds the verdict alone; what workflows print goes to stderr
        if settings.json_summary:
            started.enter_context(contextlib.redirect_stdout(sys.stderr))
        summary = _run_rows(plan, state, backend, display)
    if summary.stopped_early or (state.only is not None and not summary.interrupted):
        # What fail-fast or the breaker left unstarted, and the rollouts --retry-errors alone
        # does not run (they never finished), count as failed: the gates judge every rollout
        # the run is made of, not the ones this invocation happened to record.
        summary = with_not_run(summary, max(plan.rollouts - summary.total, 0))
    title = settings.description + plan.model_note
    return finish_run(plan, summary, console, title)


def _start_model_server(plan: RunPlan, started: contextlib.ExitStack) -> RunPlan:
    """For ``llm: embedded`` or ``judge: embedded`` (one server for both): start the model
    server, stopped with ``started``, and return the plan with its endpoint; any other
    plan as it is."""
    if not any(s is not None and s.embedded for s in (plan.spec.llm, plan.spec.judge)):
        return plan
    from osmo_run.llm.embedded import MODEL_NAME, EmbeddedLLMServer, server_shape

    concurrency = plan.spec.build_workflow_config().concurrency.max_concurrent
    parallel, context_tokens = server_shape(concurrency)
    log_path = plan.paths.results.with_suffix(".llm.log")
    server = EmbeddedLLMServer(parallel=parallel, context_tokens=context_tokens, log_path=log_path)
    started.callback(server.stop)
    endpoint = server.start()
    startup_sec = server.startup_sec or 0.0
    info = {
        "embedded": MODEL_NAME,
        "pid": server.pid,
        "parallel": parallel,
        "startup_sec": round(startup_sec, 3),
    }
    note = f" · {MODEL_NAME} (embedded, ready in {startup_sec:.1f}s)"
    return with_model_server(plan, endpoint, info, note)


def run_budget(spec: RunSpec) -> RunBudget:
    """The spec's ``budget`` with its ``prices`` (not limited when it sets none)."""
    prices = {
        model: Price(price.input_per_mtok, price.output_per_mtok)
        for model, price in spec.prices.items()
    }
    llm_model = None if spec.llm is None else spec.llm.model
    return RunBudget(
        spec.budget.tokens, spec.budget.usd, spec.budget.model_calls, prices, llm_model
    )


def model_layer(plan: RunPlan, state: ResumeState, concurrency: int) -> ModelLayer:
    """The run's model layer: an adaptive limit per endpoint under ``concurrency`` (fixed
    where the spec's ``llm`` or ``judge`` gives ``max_concurrency``), and the spec's budget,
    counting what the rollouts kept from earlier invocations spent (``--resume``)."""
    spec = plan.spec
    limits = ModelLimits(concurrency)
    for section, endpoint in ((spec.llm, plan.llm), (spec.judge, plan.judge)):
        if section is not None and endpoint is not None and section.max_concurrency:
            limits.fix(endpoint.base_url, section.max_concurrency)
    budget = run_budget(spec)
    if budget.limited and state.kept:
        kept = state.stats.build()
        seed_budget(budget, spec, kept.usage, kept.grader_usage)
    return ModelLayer(limits, budget)


def seed_budget(
    budget: RunBudget,
    spec: RunSpec,
    usage: LLMUsage | UsageSummary | None,
    grader_usage: LLMUsage | UsageSummary | None,
) -> None:
    """Count in ``budget`` what the rollouts kept from earlier invocations spent
    (``--resume``): the workflows' ``usage`` at ``llm.model``'s price, the graders'
    ``grader_usage`` at ``judge.model``'s."""
    llm_model = None if spec.llm is None else spec.llm.model
    judge_model = None if spec.judge is None else spec.judge.model
    for spent, model in ((usage, llm_model), (grader_usage, judge_model)):
        if spent is not None:
            price = budget.prices.get(model or "")
            cost = (
                0.0 if price is None else price.cost(spent.prompt_tokens, spent.completion_tokens)
            )
            budget.seed(spent.total_tokens, cost, spent.model_calls)


def _describe(plan: RunPlan, state: ResumeState, backend: ExecutionBackend) -> str:
    """The line the display starts with: what runs, how many, where it goes."""
    samples = plan.samples
    to_run = state.to_run(plan.rollouts)
    parts = [
        plan.settings.description + plan.model_note,
        f"{to_run} "
        + ("rows" if samples == 1 else f"rollouts ({samples} samples per row)")
        + (f" ({state.kept} kept from before)" if state.kept else ""),
        f"concurrency {backend.max_concurrency}",
        f"output {plan.paths.results}",
    ]
    if note := backend.setup_note():
        parts.append(note)
    if plan.problems:
        parts.append(f"{len(plan.problems)} bad rows recorded as validation errors")
    if state.repaired:
        parts.append("repaired a torn last line")
    return " · ".join(parts)


def _run_rows(
    plan: RunPlan, state: ResumeState, backend: ExecutionBackend, display: Display
) -> RunSummary:
    """Run the rows ``state`` leaves to run through ``backend``; the summary of the whole
    run (kept rollouts included). Ctrl-C stops dispatching; a second one exits at once."""
    settings = plan.settings
    with contextlib.ExitStack() as signals:  # restored after leftover tasks had their grace

        async def main() -> RunSummary:
            loop = asyncio.get_running_loop()
            runner: Runner | None = None
            layer = model_layer(plan, state, backend.model_calls_ceiling)
            use_model_layer(layer)  # this task's context: prepare's and the rows' inherit it
            preparing = asyncio.ensure_future(backend.prepare())

            def interrupt() -> None:
                if runner is None:  # still preparing: nothing ran, nothing to record
                    preparing.cancel()
                    return
                display.message(
                    "Interrupted: cancelling rows in flight (press Ctrl-C again to quit at once)"
                )
                runner.interrupt()

            # from the start: a SIGTERM during an image build must not orphan the build
            signals.enter_context(interrupts_handled(loop, interrupt, display.stop))
            try:
                await preparing  # before any file is written: a refusal leaves nothing
            except asyncio.CancelledError:
                await backend.aclose()
                print(
                    "interrupted while preparing the run (its checks and image builds were "
                    "stopped, their processes ended); no row ran",
                    file=sys.stderr,
                )
                raise KeyboardInterrupt from None  # exit 130
            with OutputWriter(plan.paths.results, plan.secrets, turns=True) as writer:
                layer.show_on(display, writer.mask)
                runner = Runner(
                    backend,
                    writer,
                    display,
                    retry=plan.spec.retries.policy(),
                    stats=state.stats,
                    fail_fast=settings.fail_fast or settings.smoke_rows is not None,
                    breaker=None if plan.spec.breaker is None else Breaker(plan.spec.breaker),
                )
                write_manifest(plan.paths.manifest, plan.manifest)
                display.start(state.to_run(plan.rollouts), _describe(plan, state, backend))
                if state.note:
                    display.message(state.note)
                items = work_items(
                    plan.dataset.rows(),
                    plan.samples,
                    state.skip(plan.samples),
                    state.earlier_attempts(plan.samples),
                )
                try:
                    summary = await runner.run(items)
                finally:
                    display.stop()
                    await backend.aclose()
                budget = layer.budget
                stopped = budget is not None and (
                    budget.refused_calls or (budget.spent and plan.rollouts > summary.total)
                )
                return dataclasses.replace(  # a new summary: the one built is never patched
                    summary,
                    model=layer.summary(),
                    budget=budget.stopped() if stopped and budget is not None else None,
                )

        with tuned_for_rollouts():
            return run_to_completion(main())
