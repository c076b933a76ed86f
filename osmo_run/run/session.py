"""One run from the command line's point of view: settings in, exit code out.

Shared by ``osmo-run local`` and ``osmo-run harbor``: the backend factory is the only
difference between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import os
import random
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console

from osmo_run import __version__
from osmo_run.backends.base import ExecutionBackend
from osmo_run.errors import InputError, OutputError
from osmo_run.run.ci_reports import append_step_summary, markdown_summary, write_junit
from osmo_run.run.dataset import Dataset
from osmo_run.run.display import make_display, render_summary
from osmo_run.run.gates import GateFailure, Gates, evaluate
from osmo_run.run.manifest import Manifest, read_manifest, write_manifest
from osmo_run.run.output import OutputWriter
from osmo_run.run.runfiles import RunPaths, iter_records, repair_torn_tail, rewrite_without
from osmo_run.run.runner import Runner, work_items
from osmo_run.run.spec import RunSpec
from osmo_run.run.summary import RunSummary, SummaryBuilder
from osmo_run.sdk._rollout import run_to_completion
from osmo_run.sdk.context import LLMEndpoint


class ExitCode(enum.IntEnum):
    """The process exit codes, identical for every backend (documented in the README)."""

    OK = 0
    """The run passed: every rollout succeeded, or every given gate held."""
    ROLLOUTS_FAILED = 1
    """A rollout failed (no gate given), or a quality gate (--fail-under,
    --min-pass-rate) did not hold."""
    INVALID_INPUT = 2
    """Bad invocation, spec, dataset or environment; nothing was run."""
    INTERNAL_ERROR = 3
    """A bug in osmo-run."""
    ERROR_BUDGET_EXCEEDED = 4
    """More rollouts failed than --max-errors / --max-error-rate allow."""
    INTERRUPTED = 130
    """Ctrl-C or SIGTERM: in-flight rows were recorded as cancelled."""


@dataclass
class RunSettings:
    """Everything a run needs once the spec and the flags are merged.

    ``output`` is the results file (default ``runs/<run id>/results.jsonl``). ``resume``
    continues a run; ``retry_errors`` (a set of categories, empty for all) reruns its
    failed rollouts. ``backend_identity`` holds the backend's result-defining settings.
    """

    dataset: Path
    spec: RunSpec
    output: Path | None = None
    display: str = "auto"
    overwrite: bool = False
    resume: bool = False
    retry_errors: frozenset[str] | None = None
    description: str = ""
    backend_name: str = "local"
    backend_identity: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    gates: Gates = field(default_factory=Gates)
    junit_xml: Path | None = None
    summary_md: Path | None = None
    json_summary: bool = False
    """Print the final summary as one JSON object on stdout (the console is stderr)."""
    smoke_rows: int | None = None
    """Run a fixed random subset of this many rows, with short timeouts and fail-fast."""
    seed: int = 0
    fail_fast: bool = False
    llm: LLMEndpoint | None = None
    """The endpoint rollouts reach: the spec's, or for ``llm: embedded`` the model server
    :func:`execute_run` starts (set before it calls ``make_backend``)."""


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code_for(summary: RunSummary, failures: list[GateFailure] | None = None) -> ExitCode:
    """The exit code of a finished run given the gates it failed (see :class:`ExitCode`).

    ``failures`` defaults to the verdict without gates (any failed rollout fails).
    """
    if summary.interrupted:
        return ExitCode.INTERRUPTED
    if failures is None:
        failures = evaluate(summary, Gates())
    if not failures:
        return ExitCode.OK
    if any(f.kind == "budget" for f in failures):
        return ExitCode.ERROR_BUDGET_EXCEEDED
    return ExitCode.ROLLOUTS_FAILED


def build_manifest(settings: RunSettings, dataset: Dataset, rows: int) -> Manifest:
    """The run's identity: defining fields (blocking a resume when changed) and the rest."""
    spec = settings.spec
    workflow_config = spec.agent_workflow_config()
    defining: dict[str, Any] = {
        "backend": settings.backend_name,
        "workflow": spec.workflow,
        "workflow_settings": workflow_config.settings,
        "grader": spec.grader,
        "grader_settings": spec.grader_config_object().settings,
        "timeouts": spec.timeouts.model_dump(),
        "model": None if spec.llm is None else spec.llm.model,
        "dataset_sha256": dataset.content_sha256(),
        "rows": rows,
        "limit": spec.limit,
        "shard": spec.shard,
        "samples_per_row": spec.samples_per_row,
        **settings.backend_identity,
    }
    info: dict[str, Any] = {
        "osmo_run_version": __version__,
        "code_dir": str((spec.code_dir or Path.cwd()).resolve()),  # where regrade imports from
        "dataset_path": str(settings.dataset.resolve()),  # regrade finds it from anywhere
        "concurrency": workflow_config.concurrency.max_concurrent,
        "llm_base_url": None if spec.llm is None else spec.llm.base_url,
        "pass_threshold": spec.pass_threshold,
        "retries": spec.retries.model_dump(),
        **settings.info,
    }
    return Manifest(defining=defining, info=info, dataset_name=settings.dataset.stem)


@dataclass
class _Prepared:
    """What an existing run directory contributes to this invocation."""

    stats: SummaryBuilder
    done: bytearray | None = None
    """Bit per (row index, sample): set when that rollout is finished and kept."""
    only: bytearray | None = None
    """With ``--retry-errors`` alone: bit set for the rollouts to rerun (nothing else runs)."""
    kept: int = 0
    rerun: int = 0
    repaired: bool = False

    def skip(self, samples: int) -> Callable[[int, int], bool] | None:
        done, only = self.done, self.only
        if only is not None:
            return lambda row, sample: not _bit(only, row * samples + sample)
        if done is not None:
            return lambda row, sample: _bit(done, row * samples + sample)
        return None


def _bit(bits: bytearray, index: int) -> bool:
    byte = index >> 3
    return byte < len(bits) and bool(bits[byte] & (1 << (index & 7)))


def _set_bit(bits: bytearray, index: int) -> None:
    byte = index >> 3
    if byte >= len(bits):
        bits.extend(bytes(byte - len(bits) + 1))
    bits[byte] |= 1 << (index & 7)


def _remove_run_files(paths: RunPaths) -> None:
    for path in (paths.results, paths.summary, paths.manifest, paths.attempts):
        path.unlink(missing_ok=True)


def _nothing_to_continue(paths: RunPaths, manifest: Manifest, settings: RunSettings) -> str:
    """Why there is no run to continue, with what changed against the latest run of the
    same dataset when one exists next to where this run would be."""
    flag = "--resume" if settings.resume else "--retry-errors"
    message = f"{flag}: no run with these settings at {paths.directory}"
    if settings.output is not None:
        return message
    candidates = [
        (candidate.stat().st_mtime, candidate)
        for candidate in paths.directory.parent.glob(f"{manifest.dataset_name}-*/*.manifest.json")
    ]
    for _, candidate in sorted(candidates, reverse=True):
        try:
            previous = read_manifest(candidate)
        except InputError:
            continue
        if previous is not None and "regrade_of" not in previous.defining:  # not resumable
            changes = manifest.differences(previous)
            return (
                f"{message}; the latest run of this dataset, {candidate.parent}, differs in "
                "what defines its results:\n" + "\n".join(changes) + "\nrestore those "
                "settings to continue it, or run without the flag to start a new run"
            )
    return message + "; run without the flag to start it"


def prepare_run_dir(
    paths: RunPaths, manifest: Manifest, settings: RunSettings, samples: int
) -> _Prepared:
    """Decide what of an existing run is kept; raise :class:`InputError` when the run may
    not be continued (a defining field changed, or no flag says what to do)."""
    spec = settings.spec
    stats = SummaryBuilder(spec.pass_threshold, samples)
    if paths.results.is_dir():
        raise OutputError(
            f"{paths.results}: --output names a directory; give a file path like x.jsonl"
        )
    has_results = paths.results.exists() and paths.results.stat().st_size > 0
    continuing = settings.resume or settings.retry_errors is not None
    if settings.overwrite:
        _remove_run_files(paths)
        return _Prepared(stats)
    if not has_results:
        if continuing:
            raise InputError(_nothing_to_continue(paths, manifest, settings))
        paths.results.unlink(missing_ok=True)
        return _Prepared(stats)
    if not continuing:
        raise OutputError(
            f"{paths.results}: already holds results of this run; pass --resume to continue "
            "it, --retry-errors to rerun its failures, or --overwrite to start over"
        )
    previous = read_manifest(paths.manifest)
    if previous is None:
        raise InputError(
            f"{paths.manifest}: missing, so {paths.results} cannot be checked against this "
            "run; pass --overwrite to start over"
        )
    changes = manifest.differences(previous)
    if changes:
        raise InputError(
            "this run differs from the one in "
            f"{paths.directory} in what defines its results:\n"
            + "\n".join(changes)
            + "\npass --overwrite to start over, or choose another --output"
        )
    prepared = _Prepared(stats, repaired=repair_torn_tail(paths.results))
    categories = settings.retry_errors
    drop: set[tuple[str, int]] = set()
    done = bytearray()
    # --retry-errors alone runs exactly the dropped rollouts; with --resume, all unfinished.
    only = bytearray() if not settings.resume else None
    for record in iter_records(paths.results):
        status = record.get("status")
        sample = int(record.get("sample_index", 0))
        position = int(record.get("row_index", 0)) * samples + sample
        rerun = status == "cancelled" or (
            categories is not None
            and status == "failure"
            and (not categories or record.get("error_category") in categories)
        )
        if rerun:
            drop.add((str(record["row_id"]), sample))
            if only is not None:
                _set_bit(only, position)
        else:
            _set_bit(done, position)
            stats.add_record(record)
            prepared.kept += 1
    prepared.rerun = rewrite_without(paths, drop)
    prepared.done, prepared.only = done, only
    return prepared


def execute_run(
    settings: RunSettings,
    make_backend: Callable[[RunPaths, str], ExecutionBackend],
    console: Console,
    secrets: tuple[str, ...] = (),
) -> ExitCode:
    """Validate the dataset, prepare the run directory, run what is left to run, write the
    summary and print it; return the exit code.

    With ``llm: embedded`` the model server starts once the run directory is ready and
    stops when this returns or raises (Ctrl-C included). Raises
    :class:`~osmo_run.errors.OsmoRunError` for bad input before anything runs.
    """
    with contextlib.ExitStack() as started:  # what the run starts, stopped when it ends
        return _execute_run(settings, make_backend, console, secrets, started)


def _start_embedded_llm(
    settings: RunSettings, paths: RunPaths, manifest: Manifest, started: contextlib.ExitStack
) -> None:
    """For ``llm: embedded``: start the model server, stopped with ``started``, and make its
    endpoint the run's (``settings.llm``, recorded in the manifest's info)."""
    spec = settings.spec
    if spec.llm is None or not spec.llm.embedded:
        return
    from osmo_run.llm.embedded import MODEL_NAME, EmbeddedLLMServer, server_shape

    parallel, context = server_shape(spec.agent_workflow_config().concurrency.max_concurrent)
    log_path = paths.results.with_suffix(".llm.log")
    server = EmbeddedLLMServer(parallel=parallel, context_tokens=context, log_path=log_path)
    started.callback(server.stop)
    settings.llm = server.start()
    startup_sec = server.startup_sec or 0.0
    manifest.info["llm_base_url"] = settings.llm.base_url
    manifest.info["llm_server"] = {
        "embedded": MODEL_NAME,
        "pid": server.pid,
        "parallel": parallel,
        "startup_sec": round(startup_sec, 3),
    }
    settings.description += f" · {MODEL_NAME} (embedded, ready in {startup_sec:.1f}s)"


def _execute_run(
    settings: RunSettings,
    make_backend: Callable[[RunPaths, str], ExecutionBackend],
    console: Console,
    secrets: tuple[str, ...],
    started: contextlib.ExitStack,
) -> ExitCode:
    spec = settings.spec
    samples = spec.samples_per_row
    if settings.smoke_rows is not None:
        spec = settings.spec = _smoke_spec(spec)
    dataset = Dataset(
        settings.dataset,
        agent_timeout_sec=spec.timeouts.agent_sec,
        grader_timeout_sec=spec.timeouts.grader_sec,
        limit=spec.limit,
        shard=spec.shard_tuple(),
    )
    rows, problems = dataset.validate(stop_on_error=spec.bad_rows == "stop")
    if settings.smoke_rows is not None:
        indexes = [row.index for row in dataset.rows()]  # within --limit and --shard
        chosen = random.Random(settings.seed).sample(indexes, min(settings.smoke_rows, rows))
        dataset.select = frozenset(chosen)
        rows, problems = dataset.validate(stop_on_error=spec.bad_rows == "stop")
        settings.backend_identity["smoke"] = {"rows": settings.smoke_rows, "seed": settings.seed}
    manifest = build_manifest(settings, dataset, rows)
    paths = RunPaths(settings.output or Path("runs") / manifest.run_id / "results.jsonl")
    prepared = prepare_run_dir(paths, manifest, settings, samples)
    _start_embedded_llm(settings, paths, manifest, started)
    backend = make_backend(paths, manifest.run_id)
    if settings.display == "plain":  # no control codes, even on a terminal (or a CI pty)
        console = Console(file=console.file, highlight=False, color_system=None)
    display = make_display(settings.display, console)
    to_run = prepared.rerun if prepared.only is not None else rows * samples - prepared.kept
    description = (
        f"{settings.description} · {to_run} "
        + ("rows" if samples == 1 else f"rollouts ({samples} samples per row)")
        + (f" ({prepared.kept} kept from before)" if prepared.kept else "")
        + f" · concurrency {backend.max_concurrency} · output {paths.results}"
    )
    if problems:
        description += f" · {len(problems)} bad rows recorded as validation errors"
    if prepared.repaired:
        description += " · repaired a torn last line"

    async def main() -> RunSummary:
        loop = asyncio.get_running_loop()
        await backend.prepare()  # before any file is written: a refusal leaves nothing behind
        with OutputWriter(paths.results, secrets) as writer:
            runner = Runner(
                backend,
                writer,
                display,
                retry=spec.retries.policy(),
                stats=prepared.stats,
                fail_fast=settings.fail_fast or settings.smoke_rows is not None,
            )

            def interrupt() -> None:
                display.message(
                    "Interrupted: cancelling rows in flight (press Ctrl-C again to quit at once)"
                )
                runner.interrupt()

            interrupted = False

            def on_signal(signum: int, frame: FrameType | None) -> None:
                # A Python-level handler, not loop.add_signal_handler: it runs even while a
                # workflow blocks the event loop, so a second Ctrl-C always quits at once.
                nonlocal interrupted
                if interrupted:
                    display.stop()
                    os._exit(ExitCode.INTERRUPTED)  # second Ctrl-C: leave now; rows are on disk
                interrupted = True
                try:
                    loop.call_soon_threadsafe(interrupt)
                except RuntimeError:
                    pass  # the loop has closed: the run is over

            for sig in _SIGNALS:
                signal.signal(sig, on_signal)
            write_manifest(paths.manifest, manifest)
            display.start(to_run, description)
            items = work_items(dataset.rows(), samples, prepared.skip(samples))
            try:
                return await runner.run(items)
            finally:
                display.stop()
                await backend.aclose()

    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    # --json: stdout holds the verdict alone; what workflows print goes to stderr instead
    printed = contextlib.redirect_stdout(sys.stderr) if settings.json_summary else None
    try:
        with printed or contextlib.nullcontext():
            summary = run_to_completion(main())
    finally:  # after leftover tasks had their grace, which a second Ctrl-C may cut short
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    summary.output = str(paths.results)
    failures = evaluate(summary, settings.gates)
    code = exit_code_for(summary, failures)
    write_summary(paths, summary)
    console.print(render_summary(summary))
    for failure in failures if settings.gates.given else []:
        console.print(failure.line(), style="red", markup=False, soft_wrap=True)
    _write_ci_reports(settings, paths, summary, failures)
    if settings.json_summary:
        verdict = {
            "exit_code": int(code),
            "passed": not failures and not summary.interrupted,
            "gate_failures": [vars(f) for f in failures],
            "run_dir": str(paths.directory),
            "summary": summary.to_dict(),
        }
        sys.stdout.write(json.dumps(verdict) + "\n")
        sys.stdout.flush()
    return code


_SMOKE_TIMEOUT_SEC = 60.0


def _smoke_spec(spec: RunSpec) -> RunSpec:
    """``spec`` with timeouts capped for a CI smoke step that must finish quickly."""

    def cap(value: float | None) -> float:
        return _SMOKE_TIMEOUT_SEC if value is None else min(value, _SMOKE_TIMEOUT_SEC)

    timeouts = spec.timeouts.model_copy(
        update={
            "agent_sec": cap(spec.timeouts.agent_sec),
            "grader_sec": cap(spec.timeouts.grader_sec),
        }
    )
    return spec.model_copy(update={"timeouts": timeouts})


def _write_ci_reports(
    settings: RunSettings, paths: RunPaths, summary: RunSummary, failures: list[GateFailure]
) -> None:
    threshold = settings.spec.pass_threshold
    if settings.junit_xml is not None:
        write_junit(paths.results, settings.junit_xml, settings.dataset.stem, threshold)
    if settings.summary_md is not None or os.environ.get("GITHUB_STEP_SUMMARY"):
        markdown = markdown_summary(paths.results, summary, failures, settings.description)
        if settings.summary_md is not None:
            settings.summary_md.parent.mkdir(parents=True, exist_ok=True)
            settings.summary_md.write_text(markdown, encoding="utf-8")
        append_step_summary(markdown)


def write_summary(paths: RunPaths, summary: RunSummary) -> None:
    """Save ``summary`` as the run's summary JSON, atomically."""
    tmp = paths.summary.with_name(paths.summary.name + ".tmp")
    tmp.write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(paths.summary)
