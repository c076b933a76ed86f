"""What an existing run directory contributes to this invocation: the rollouts kept, those
to run again, and the statistics of the kept ones (``--resume``, ``--retry-errors``).

:func:`prepare_run_dir` is the only step before the run that changes files: it repairs a
torn last line, moves rollouts to rerun into the attempts file, or clears the run with
``--overwrite``. It refuses (:class:`~osmo_run.errors.InputError`) to continue a run whose
defining fields changed. ``--resume`` where there is no run yet starts one (a requeued job
repeats one command); ``--retry-errors`` alone with nothing to retry is refused. After the
breaker stopped a run, ``--resume`` also reruns the rollouts that failed with the cause it
stopped on (read from the run's summary), so the fixed run holds every row once, passed.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osmo_run.errors import InputError, OutputError
from osmo_run.run.controls.breaker import cause_of_trip, failure_cause
from osmo_run.run.executing.plan import RunPlan
from osmo_run.run.reading.rows import shown
from osmo_run.run.reporting.summary import SummaryBuilder
from osmo_run.run.writing.manifest import Manifest, read_manifest
from osmo_run.run.writing.output import check_writable
from osmo_run.run.writing.records import attempts_before_rerun, record_safe_name
from osmo_run.run.writing.runfiles import (
    BadLine,
    RunPaths,
    iter_records,
    repair_torn_tail,
    rewrite_without,
)
from osmo_run.sdk.names import rollout_name, safe_name
from osmo_run.sdk.types import ErrorCategory


@dataclass
class ResumeState:
    """The rollouts an earlier invocation finished, and what this one runs.

    ``done`` has a bit per (row index, sample) set for each finished rollout that is kept;
    ``only`` (``--retry-errors`` without ``--resume``) a bit for each rollout to rerun,
    nothing else running. ``stats`` already counts the kept rollouts.
    """

    stats: SummaryBuilder
    done: bytearray | None = None
    only: bytearray | None = None
    kept: int = 0
    rerun: int = 0
    repaired: bool = False
    note: str | None = None
    """What the display says first (``--resume`` found no run and starts one)."""
    earlier: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """Per rollout position (row index x samples + sample) that runs again, the attempts
    its record held (:func:`~osmo_run.run.writing.records.attempts_before_rerun`)."""

    def skip(self, samples: int) -> Callable[[int, int], bool] | None:
        """``skip(row_index, sample_index)``: whether that rollout is not to run now."""
        done, only = self.done, self.only
        if only is not None:
            return lambda row, sample: not _bit(only, row * samples + sample)
        if done is not None:
            return lambda row, sample: _bit(done, row * samples + sample)
        return None

    def earlier_attempts(self, samples: int) -> Callable[[int, int], list[dict[str, Any]] | None]:
        """``earlier(row_index, sample_index)``: the attempts a rollout that runs again
        starts with (``None`` for one that never ran)."""
        earlier = self.earlier
        return lambda row, sample: earlier.get(row * samples + sample)

    def to_run(self, rollouts: int) -> int:
        """How many of the plan's ``rollouts`` this invocation runs."""
        return self.rerun if self.only is not None else rollouts - self.kept


def _bit(bits: bytearray, index: int) -> bool:
    byte = index >> 3
    return byte < len(bits) and bool(bits[byte] & (1 << (index & 7)))


def _set_bit(bits: bytearray, index: int) -> None:
    byte = index >> 3
    if byte >= len(bits):
        bits.extend(bytes(byte - len(bits) + 1))
    bits[byte] |= 1 << (index & 7)


def prepare_run_dir(plan: RunPlan) -> ResumeState:
    """Decide what of an existing run is kept; raise :class:`InputError` when the run may
    not be continued (a defining field changed, or no flag says what to do)."""
    settings, paths = plan.settings, plan.paths
    stats = SummaryBuilder(plan.spec.pass_threshold, plan.samples)
    if paths.results.is_dir():
        raise OutputError(
            f"{paths.results}: --output names a directory; give a file path like x.jsonl"
        )
    check_writable(paths.results, "--output")
    has_results = paths.results.exists() and paths.results.stat().st_size > 0
    continuing = settings.resume or settings.retry_errors is not None
    if settings.overwrite:
        _remove_old_artifacts(plan)
        for path in (paths.results, paths.summary, paths.manifest, paths.attempts, paths.turns):
            path.unlink(missing_ok=True)
        return ResumeState(stats)
    if not has_results:
        if continuing and not settings.resume:  # --retry-errors alone: nothing to retry
            raise InputError(_no_run_here(plan))
        paths.results.unlink(missing_ok=True)
        paths.turns.unlink(missing_ok=True)  # no result holds its rollouts: stale
        # --resume with no run to continue starts it: the one command a requeued job repeats
        return ResumeState(stats, note=_no_run_here(plan) if settings.resume else None)
    if not continuing:
        raise OutputError(
            f"{paths.results}: already holds results of this run; pass --resume to continue "
            "it, --retry-errors to rerun its failures, or --overwrite to start over"
        )
    _check_same_run(paths, plan.manifest)
    return _kept_and_rerun(plan, ResumeState(stats, repaired=repair_torn_tail(paths.results)))


def _remove_old_artifacts(plan: RunPlan) -> None:
    """For ``--overwrite``: remove ``artifacts/<rollout>`` of every rollout the old run
    recorded (results and attempts) or this one will run, so that no file of the old run
    is mistaken for this one's. Other entries of ``artifacts/`` (the directory may be shared
    when ``--output`` names one) are left alone."""
    artifacts = plan.paths.artifacts
    if not artifacts.is_dir():
        return
    present = {entry.name for entry in artifacts.iterdir()}  # names: no id reaches outside
    stale: set[str] = set()
    for source in (plan.paths.results, plan.paths.attempts):
        if source.is_file():
            stale.update(record_safe_name(record) for record in iter_records(source))
    for row in plan.dataset.rows():
        name = safe_name(row.row_id)
        if plan.samples == 1:
            stale.add(name)
        else:
            stale.update(rollout_name(name, k) for k in range(plan.samples))
    for name in present & stale:
        shutil.rmtree(artifacts / name, ignore_errors=True)
    with contextlib.suppress(OSError):
        artifacts.rmdir()  # only when nothing else is left in it


def _check_same_run(paths: RunPaths, manifest: Manifest) -> None:
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


def _kept_and_rerun(plan: RunPlan, state: ResumeState) -> ResumeState:
    """Count the finished rollouts that stay, and move those to rerun out of the results."""
    categories = plan.settings.retry_errors
    samples = plan.samples
    tripped_on = _breaker_cause(plan)
    tripped_reruns = budget_reruns = 0
    drop: set[tuple[str, int]] = set()
    done = bytearray()
    # --retry-errors alone runs exactly the dropped rollouts; with --resume, all unfinished.
    only = bytearray() if not plan.settings.resume else None
    bad: list[BadLine] = []
    rows = plan.dataset.total_rows()  # a row_index is the row's place in the whole file
    placed = bytearray()  # every position a record holds: a second record of one is refused
    for record in iter_records(plan.paths.results, bad):
        status = record.get("status")
        row_index = _index(plan.paths.results, record, "row_index", rows)
        sample = _index(plan.paths.results, record, "sample_index", samples, default=0)
        position = row_index * samples + sample
        if _bit(placed, position):
            raise InputError(
                f"{plan.paths.results}: row {shown(record.get('row_id'))} (row_index "
                f"{row_index}, sample {sample}) is recorded twice; remove one of the lines, or "
                "pass --overwrite to start over"
            )
        _set_bit(placed, position)
        # a row the spent budget stopped needed another model call: --resume (with a
        # larger budget) runs it again, like a row that was in flight
        budget_stopped = (
            plan.settings.resume
            and status == "failure"
            and record.get("error_category") == ErrorCategory.BUDGET_EXCEEDED.value
        )
        budget_reruns += budget_stopped
        rerun = (
            status == "cancelled"
            or budget_stopped
            or (
                categories is not None
                and status == "failure"
                and (not categories or record.get("error_category") in categories)
            )
        )
        if not rerun and tripped_on is not None and _failed_with(record, tripped_on):
            rerun, tripped_reruns = True, tripped_reruns + 1
        if rerun:
            drop.add((str(record["row_id"]), sample))
            state.earlier[position] = attempts_before_rerun(record)
            if only is not None:
                _set_bit(only, position)
        else:
            _set_bit(done, position)
            state.stats.add_record(record)
            state.kept += 1
    if bad:  # continuing would keep a line that no reader understands, silently
        raise InputError(_bad_line_message(plan.paths.results, bad[0]))
    state.rerun = rewrite_without(plan.paths, drop)
    state.done, state.only = done, only
    unfinished = plan.rollouts - state.kept - state.rerun
    if only is not None and unfinished > 0:
        state.note = (
            f"--retry-errors: {unfinished} rollouts never finished and do not run now (add "
            "--resume to run them); the gates count them as failures"
        )
    if budget_reruns:
        state.note = (
            f"--resume: the {budget_reruns} rollouts the budget stopped (budget_exceeded) run "
            "again, with the rows not started"
        )
    if tripped_on is not None:
        state.note = (
            f"--resume: the breaker stopped this run on {tripped_on.partition(':')[0]}; the "
            f"{tripped_reruns} rollouts that failed with its cause run again, with the rows "
            "not started"
        )
    return state


_ABSENT = object()


def _index(
    results: Path, record: dict[str, Any], key: str, bound: int, default: object = _ABSENT
) -> int:
    """``record[key]`` (absent: ``default``), an integer from 0 to ``bound - 1``. Raises
    :class:`InputError` for anything else: a hand-edited line must not place a record
    outside the run (and a bitmap of its rows must not grow to its ``row_index``)."""
    value = record.get(key, default)
    if type(value) is int and 0 <= value < bound:
        return value
    shown_value = "nothing" if value is _ABSENT else shown(value)
    raise InputError(
        f"{results}: the record of row {shown(record.get('row_id'))} has {key} {shown_value}, "
        f"not one of this run's (0 to {bound - 1}); remove the line (its rollout then runs "
        "again) or pass --overwrite to start over"
    )


def _breaker_cause(plan: RunPlan) -> str | None:
    """For ``--resume``: the cause on which the breaker stopped the run being continued,
    read from its saved summary (``None``: it did not stop, or there is no summary)."""
    if not plan.settings.resume:
        return None
    try:
        summary = json.loads(plan.paths.summary.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # killed before its summary was written: nothing tripped
        return None
    return cause_of_trip(summary if isinstance(summary, dict) else None)


def _failed_with(record: dict[str, Any], cause: str) -> bool:
    """Whether the output ``record`` is a failure with the breaker's ``cause``."""
    ids = (str(record.get("rollout_id") or ""), str(record.get("row_id") or ""))
    category, message = record.get("error_category"), record.get("error_message")
    return record.get("status") == "failure" and failure_cause(category, message, ids) == cause


def _bad_line_message(results: Path, bad: BadLine) -> str:
    prefix = "not a result record"
    why = bad.reason.removeprefix(prefix).removeprefix(": ")
    detail = f" ({why})" if why else ""
    return (
        f"{results}:{bad.number}: not a result record{detail}; remove the line (its rollout "
        "then runs again) or pass --overwrite to start over"
    )


def _no_run_here(plan: RunPlan) -> str:
    """That there is no run with these settings to continue; for ``--resume``, that one
    starts, and for both what changed against the latest run of the same dataset when one
    exists next to where this run would be."""
    settings, paths, manifest = plan.settings, plan.paths, plan.manifest
    flag = "--resume" if settings.resume else "--retry-errors"
    message = f"{flag}: no run with these settings at {paths.directory}"
    if settings.resume:
        message += "; starting one"
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
            advice = (
                ""
                if settings.resume
                else "\nrestore those settings to continue it, or run "
                "without the flag to start a new run"
            )
            return (
                f"{message}; the latest run of this dataset, {candidate.parent}, differs in "
                "what defines its results:\n" + "\n".join(changes) + advice
            )
    return message if settings.resume else message + "; run without the flag to start it"
