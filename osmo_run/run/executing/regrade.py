"""Grade a finished run's saved samples again, without rerunning any workflow.

The new results go to a run directory of their own (``<run>-regrade-<hash>``) whose
manifest names the run it regraded. The grader runs in this process, whatever backend
produced the samples. Rows whose workflow failed are carried over unchanged.

Which grader, with which settings and which judge: :func:`choose_grader` (the flags, a
spec's grader and judge section, or the run's own grader), checked like a run's before
anything is written; :func:`judge_endpoint` starts the embedded model for
``judge: embedded``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from osmo_run.errors import InputError, OutputError
from osmo_run.run.configuring.spec import RunSpec, parse_shard
from osmo_run.run.configuring.user_code import check_grader_settings
from osmo_run.run.executing.finish import write_summary
from osmo_run.run.executing.plan import with_shuffle
from osmo_run.run.reading.columns import column_map
from osmo_run.run.reading.dataset import Dataset
from osmo_run.run.reading.selection import parse_rows
from osmo_run.run.reporting.report import LoadedRun
from osmo_run.run.reporting.summary import RunSummary
from osmo_run.run.writing.aliases import Named, check_no_aliases, run_files
from osmo_run.run.writing.manifest import Manifest, write_manifest
from osmo_run.run.writing.output import OutputWriter
from osmo_run.run.writing.records import record_dict, record_line, record_safe_name
from osmo_run.run.writing.runfiles import BadLine, RunPaths, iter_records
from osmo_run.run.writing.runlock import run_locked
from osmo_run.sdk.config import GraderConfig
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.imports import resolve_class
from osmo_run.sdk.model_layer import ModelLayer, use_model_layer
from osmo_run.sdk.model_limits import ModelLimits
from osmo_run.sdk.rollout import grader_skip_reason, run_grader_phase, run_to_completion
from osmo_run.sdk.types import ExecutionRequest, ExecutionResult, RolloutSample, RolloutStatus
from osmo_run.sdk.workflow import Grader


def _requests(run: LoadedRun) -> tuple[dict[int, ExecutionRequest], Manifest]:
    manifest = run.manifest
    if manifest is None:
        raise InputError(f"{run.paths.manifest}: missing; regrade needs the run's manifest")
    dataset_path = Path(str(manifest.info.get("dataset_path", "")))
    defining = manifest.defining
    shard = defining.get("shard")
    timeouts = defining.get("timeouts") or {}
    dataset = Dataset(
        dataset_path,
        grader_timeout_sec=timeouts.get("grader_sec"),
        limit=defining.get("limit"),
        shard=parse_shard(shard) if shard else None,
        fmt=defining.get("dataset_format", "jsonl"),
        columns=column_map(None, **(defining.get("dataset_columns") or {})),
        row_ranges=parse_rows(selection) if (selection := defining.get("row_selection")) else None,
    )
    if not dataset_path.is_file() or dataset.content_sha256() != defining.get("dataset_sha256"):
        raise InputError(
            f"{dataset_path}: the run's dataset is missing or changed since the run; "
            "regrade needs the same rows (their labels)"
        )
    shuffled = defining.get("shuffle_seed")
    if shuffled is not None:  # the same draw: same seed, same rows to draw from
        dataset = with_shuffle(dataset, defining.get("limit"), int(shuffled))
    requests = {row.index: row.request for row in dataset.rows() if row.request is not None}
    return requests, manifest


def choose_grader(
    run: LoadedRun,
    grader: str | None,
    settings: dict[str, Any] | None,
    spec: RunSpec | None,
) -> tuple[str, dict[str, Any]]:
    """The grader that regrades ``run`` and its settings, checked as a run checks them.

    The grader is ``grader`` (``--grader``), else the spec's, else the run's own. The
    settings are ``settings`` (``--grader-settings``), else those that came with the chosen
    grader (the spec's ``grader_config.settings``, or the run's), else none. A judging
    grader needs an endpoint in its settings or the spec's judge section. Raises
    :class:`InputError` (no grader at all) or :class:`~osmo_run.errors.SpecError`.
    """
    if run.manifest is None:
        raise InputError(f"{run.paths.manifest}: missing; regrade needs the run's manifest")
    defining = run.manifest.defining
    spec_grader = spec.grader if spec is not None else None
    name = grader or spec_grader or defining.get("grader")
    if not name:
        raise InputError("the run had no grader; name one with --grader module:Class")
    if settings is None:
        settings = {}
        if spec is not None and name == spec_grader:
            settings = dict((spec.grader_config.settings if spec.grader_config else None) or {})
        elif grader is None and spec_grader is None:
            settings = dict(defining.get("grader_settings") or {})
    judge = spec is not None and spec.judge is not None
    check_grader_settings(str(name), settings, judge=judge)
    return str(name), settings


@contextlib.contextmanager
def judge_endpoint(spec: RunSpec | None, log_dir: Path) -> Iterator[LLMEndpoint | None]:
    """The endpoint of the spec's judge section (``None`` without one); for ``judge:
    embedded`` the embedded model's server, started here and stopped on leaving (its log
    in ``log_dir``). Raises :class:`~osmo_run.errors.SpecError` for an unset key variable
    and :class:`~osmo_run.errors.EmbeddedLLMUnavailable` without the embedded extra."""
    judge = spec.judge if spec is not None else None
    if judge is None or not judge.embedded:
        yield None if judge is None else judge.endpoint()
        return
    from osmo_run.llm.embedded import EmbeddedLLMServer

    log_dir.mkdir(parents=True, exist_ok=True)
    server = EmbeddedLLMServer(parallel=4, log_path=log_dir / "regrade-judge.llm.log")
    try:
        yield server.start()
    finally:
        server.stop()


def _regraded_paths(
    run: LoadedRun, grader: str, settings: dict[str, Any], judge: LLMEndpoint | None
) -> RunPaths:
    defining = [grader, settings] + ([judge.model] if judge is not None else [])
    digest = hashlib.sha256(json.dumps(defining, sort_keys=True).encode()).hexdigest()
    directory = run.paths.directory.resolve()
    if run.paths.results.name != "results.jsonl":  # --output x.jsonl: x-regrade-… beside it
        return RunPaths(directory / f"{run.paths.results.stem}-regrade-{digest[:8]}/results.jsonl")
    return RunPaths(directory.with_name(f"{directory.name}-regrade-{digest[:8]}") / "results.jsonl")


def regrade(
    run: LoadedRun,
    grader_name: str,
    settings: dict[str, Any],
    output: Path | None,
    overwrite: bool,
    concurrency: int = 8,
    judge: LLMEndpoint | None = None,
    inputs: tuple[Named, ...] = (),
    secrets: tuple[str, ...] = (),
    judge_max_concurrency: int | None = None,
) -> tuple[RunSummary, RunPaths]:
    """Grade every saved sample of ``run`` again with ``grader_name`` and ``settings`` (from
    :func:`choose_grader`), its judging grader calling ``judge``; return the new run's
    summary and paths (its summary file written). The judge's key and ``secrets``
    (``--env-file``'s values) are masked in the new rows. The judge's calls go through an
    adaptive limit for its endpoint under ``concurrency``, as a run's do (fixed at
    ``judge_max_concurrency``, the spec's ``judge.max_concurrency``, when given), recorded
    in the summary's ``model``. The new run is locked
    (:mod:`~osmo_run.run.writing.runlock`) while it is written.

    Raises :class:`InputError` (no manifest, changed dataset, bad grader) or
    :class:`OutputError` (the target already holds results and ``overwrite`` is off,
    another live regrade writes it, or one of its files is a file of ``run``, its dataset
    or one of ``inputs``, the files the command read besides: ``--spec``, ``--env-file``).
    """
    _refuse_unreadable_lines(run.paths.results)
    requests, manifest = _requests(run)
    grader = resolve_class(grader_name, Grader, "grader")
    paths = RunPaths(output) if output else _regraded_paths(run, grader_name, settings, judge)
    dataset = Path(str(manifest.info.get("dataset_path", "")))
    reads = [*run_files(run.paths, "the run regraded"), ("the dataset", dataset), *inputs]
    check_no_aliases(reads, run_files(paths, "--output"))
    with run_locked(paths, "regrade"):
        summary = _regrade_into(
            paths,
            run,
            requests,
            manifest,
            grader,
            grader_name,
            settings,
            overwrite,
            concurrency,
            judge,
            secrets,
            judge_max_concurrency,
        )
        write_summary(paths, summary)
    return summary, paths


def _regrade_into(
    paths: RunPaths,
    run: LoadedRun,
    requests: dict[int, ExecutionRequest],
    manifest: Manifest,
    grader: type[Grader],
    grader_name: str,
    settings: dict[str, Any],
    overwrite: bool,
    concurrency: int,
    judge: LLMEndpoint | None,
    secrets: tuple[str, ...],
    judge_max_concurrency: int | None,
) -> RunSummary:
    """:func:`regrade` once ``paths`` is locked: the new run's summary."""
    if paths.results.exists() and paths.results.stat().st_size > 0:
        if not overwrite:
            raise OutputError(f"{paths.results}: already holds results; pass --overwrite")
        paths.results.unlink()
    paths.directory.mkdir(parents=True, exist_ok=True)
    regraded = _regrade_manifest(manifest, run, grader_name, settings, judge)
    write_manifest(paths.manifest, regraded)
    config = GraderConfig(settings, bool(manifest.defining.get("grade_without_label")))
    regrader = _Regrader(run, requests, grader, config, concurrency, judge)
    builder = run.builder()
    keys = (judge.api_key,) if judge is not None and judge.api_key else ()
    limits = ModelLimits(concurrency)
    if judge is not None and judge_max_concurrency:
        limits.fix(judge.base_url, judge_max_concurrency)
    layer = ModelLayer(limits)

    async def main() -> None:
        use_model_layer(layer)  # this task's context: the grading tasks inherit it
        with OutputWriter(paths.results, (*keys, *secrets)) as writer:
            pending = [regrader.grade(record) for record in iter_records(run.paths.results)]
            for done in asyncio.as_completed(pending):
                record = await done
                if isinstance(record.get("error_message"), str):  # a grader's error, say
                    record["error_message"] = writer.mask(record["error_message"])
                record = writer.mask_record(record)
                writer.write(record_line(record))
                builder.add_record(record)

    run_to_completion(main())
    _carry_turns(run.paths.turns, paths.turns)
    summary = builder.build(output=str(paths.results))
    return dataclasses.replace(summary, model=layer.summary()) if limits.all() else summary


def _carry_turns(source: Path, target: Path) -> None:
    """Copy the regraded run's turns file (its workflows' model calls, which a regrade does
    not make again) beside the new results, replacing one an earlier regrade left there;
    no file when the run captured none. Raises :class:`OutputError` when it cannot be
    written."""
    try:
        target.unlink(missing_ok=True)
        if source.is_file():
            shutil.copyfile(source, target)  # masked when it was written
            target.chmod(0o600)
    except OSError as exc:
        raise OutputError(f"{target}: cannot copy the run's turns file: {exc.strerror}") from None


def _refuse_unreadable_lines(results: Path) -> None:
    """Raise :class:`InputError` naming the first line of ``results`` that is not a result
    record: a regrade left without it would silently grade fewer rows than the run had."""
    bad: list[BadLine] = []
    for _ in iter_records(results, bad):
        pass
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise InputError(
            f"{results}:{bad[0].number}: {bad[0].reason}{more}; mend or remove the line "
            "before regrading"
        )


def _regrade_manifest(
    manifest: Manifest,
    run: LoadedRun,
    grader: str,
    settings: dict[str, Any],
    judge: LLMEndpoint | None,
) -> Manifest:
    """The regraded run's identity: the original's, with the new grader (and judge) and a
    link back."""
    defining = {**manifest.defining, "grader": grader, "grader_settings": settings}
    info = {**manifest.info, "regraded_from": str(run.paths.results)}
    defining.pop("judge_model", None)  # the original's judge did not grade these rows
    info.pop("judge_base_url", None)
    if judge is not None:
        defining["judge_model"] = judge.model
        info["judge_base_url"] = judge.base_url
    return Manifest(
        defining={**defining, "regrade_of": manifest.run_id},
        info=info,
        dataset_name=manifest.dataset_name,
    )


class _Regrader:
    """Grades saved records again, at most ``concurrency`` at once, in this process."""

    def __init__(
        self,
        run: LoadedRun,
        requests: dict[int, ExecutionRequest],
        grader: Any,
        config: GraderConfig,
        concurrency: int,
        judge: LLMEndpoint | None = None,
    ) -> None:
        self._run = run
        self._requests = requests
        self._grader = grader
        self._config = config
        self._slots = asyncio.Semaphore(concurrency)
        self._judge = judge

    async def grade(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record graded again; as it is when its workflow failed or it has no sample."""
        request = self._requests.get(int(record.get("row_index", 0)))
        workflow_ok = record.get("status") == "success" or record.get("error_phase") == "grader"
        if request is None or record.get("sample") is None or not workflow_ok:
            return record
        saved = ExecutionResult.from_dict(record)
        result = ExecutionResult(
            rollout_id=saved.rollout_id,
            status=RolloutStatus.SUCCESS,
            sample=RolloutSample(
                saved.sample.messages,
                saved.sample.metrics,
                remove_sample=saved.sample.remove_sample,
            )
            if saved.sample
            else None,
            info=saved.info,
            backend=saved.backend,
            usage=saved.usage,
        )
        # row~k: the grader's own id; its artifacts where the workflow wrote them
        request = dataclasses.replace(request, id=saved.rollout_id, name=record_safe_name(record))
        skip = grader_skip_reason(
            request,
            True,
            grade_without_label=self._config.grade_without_label,
            sample=result.sample,
        )
        if skip is not None:
            result.grader_skipped = skip
        else:
            async with self._slots:
                # the workflow's artifacts, where the grader found them during the run
                artifacts = self._run.paths.artifacts
                result = await run_grader_phase(
                    request, result, self._grader, self._config, artifacts, self._judge
                )
        result.timings.workflow_sec = saved.timings.workflow_sec
        result.timings.queued_sec = saved.timings.queued_sec
        result.timings.total_sec = (saved.timings.workflow_sec or 0.0) + (
            result.timings.grader_sec or 0.0
        )
        return record_dict(
            str(record["row_id"]),
            int(record.get("row_index", 0)),
            int(record.get("line", 0)),
            result,
            int(record.get("sample_index", 0)),
            int(record.get("attempt", 1)),
            list(record.get("attempts") or []),
            record_safe_name(record),
        )
