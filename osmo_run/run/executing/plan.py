"""A run, planned before anything runs: which rows (limit, shard, smoke subset), with which
effective spec, under which identity (the manifest) and where its files go.

:func:`plan_run` reads and checks the whole dataset and raises
:class:`~osmo_run.errors.OsmoRunError` for bad input; nothing is written. The rows it
parsed are kept for the run (:mod:`osmo_run.run.reading.dataset`): each row is parsed once. The
plan is frozen: a step that learns something new (the embedded model's address) makes a
new plan.
"""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmo_run import __version__
from osmo_run.run.configuring.spec import RunSpec
from osmo_run.run.executing.settings import RunSettings
from osmo_run.run.reading.dataset import Dataset
from osmo_run.run.reading.selection import shuffled_pick
from osmo_run.run.writing.manifest import Manifest
from osmo_run.run.writing.runfiles import RunPaths
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.deadlines import SMOKE_DEADLINE_SEC

PROVIDER_CREDENTIALS: dict[str, tuple[str, ...]] = {
    "daytona": ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN"),
}
"""The variables holding a remote Harbor environment's credentials, by ``--env`` name."""


@dataclass(frozen=True)
class RunPlan:
    """One planned run. ``spec`` is the effective spec (``--smoke`` caps its deadlines);
    ``rows`` counts the selected rows and ``problems`` the bad ones recorded as validation
    errors (``bad_rows: record``). ``llm`` is the endpoint rollouts reach, ``None`` for
    ``llm: embedded`` until its server has started (:func:`with_model_server`); ``judge``
    the one graders reach (the spec's ``judge`` section), likewise."""

    settings: RunSettings
    spec: RunSpec
    dataset: Dataset
    rows: int
    problems: tuple[str, ...]
    manifest: Manifest
    paths: RunPaths
    llm: LLMEndpoint | None
    judge: LLMEndpoint | None = None
    model_note: str = ""
    """What the display says about the model server the run started (empty: none)."""

    @property
    def samples(self) -> int:
        return self.spec.samples_per_row

    @property
    def rollouts(self) -> int:
        return self.rows * self.samples

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values masked in everything the run writes and shows: the model's and the judge's
        API keys, the credentials of the remote Harbor environment the run uses (a
        provider's error may quote them), and ``--env-file``'s values of 8 characters or
        more (a tool's token a workflow reads)."""
        endpoints = (self.llm, self.judge)
        keys = [e.api_key for e in endpoints if e is not None and e.api_key]
        for name in PROVIDER_CREDENTIALS.get(self.spec.harbor.env, ()):
            keys += [os.environ[name]] if os.environ.get(name) else []
        return (*keys, *self.settings.env_secrets)


def plan_run(settings: RunSettings) -> RunPlan:
    """Check the dataset and fix the run's rows, identity and paths.

    Raises :class:`~osmo_run.errors.DatasetError` for a bad dataset and
    :class:`~osmo_run.errors.SpecError` for an unusable spec (an unset API key variable).
    """
    spec = smoke_spec(settings.spec) if settings.smoke_rows is not None else settings.spec
    llm = spec.llm.endpoint() if spec.llm is not None else None
    judge = spec.judge.endpoint() if spec.judge is not None else None
    dataset = spec_dataset(settings.dataset, spec)
    rows, problems = dataset.validate(stop_on_error=spec.bad_rows == "stop", keep_rows=True)
    identity = dict(settings.backend_identity)
    if settings.smoke_rows is not None:
        indexes = [row.index for row in dataset.rows()]  # within --limit and --shard
        count = min(settings.smoke_rows, rows)
        chosen = frozenset(random.Random(settings.seed).sample(indexes, count))
        dataset = spec_dataset(settings.dataset, spec, chosen)
        rows, problems = dataset.validate(stop_on_error=spec.bad_rows == "stop", keep_rows=True)
        identity["smoke"] = {"rows": settings.smoke_rows, "seed": settings.seed}
    manifest = build_manifest(settings, spec, dataset, rows, identity)
    paths = RunPaths(settings.output or Path("runs") / manifest.run_id / "results.jsonl")
    return RunPlan(settings, spec, dataset, rows, tuple(problems), manifest, paths, llm, judge)


def spec_dataset(path: Path, spec: RunSpec, select: frozenset[int] | None = None) -> Dataset:
    """The rows of ``path`` that ``spec`` runs: its format, column mapping, timeouts,
    ``limit``, ``rows``, ``shuffle``/``seed`` and ``shard`` (and a smoke subset ``select``).
    Raises :class:`~osmo_run.errors.DatasetError` for an unknown format or a file whose
    rows cannot be counted for ``--shuffle``."""
    dataset = Dataset(
        path,
        agent_timeout_sec=spec.timeouts.agent_sec,
        grader_timeout_sec=spec.timeouts.grader_sec,
        limit=spec.limit,
        shard=spec.shard_tuple(),
        select=select,
        fmt=spec.dataset.format,
        columns=spec.dataset.column_map(),
        row_ranges=spec.row_ranges(),
    )
    return with_shuffle(dataset, spec.limit if spec.shuffle else None, spec.seed)


def with_shuffle(dataset: Dataset, limit: int | None, seed: int) -> Dataset:
    """``dataset`` keeping ``limit`` rows drawn at random with ``seed`` (``--shuffle``)
    from those its ``--rows`` keeps (a new dataset); ``dataset`` when ``limit`` is ``None``."""
    if limit is None:
        return dataset
    return dataset.with_pick(shuffled_pick(dataset.eligible_rows(), limit, seed))


def smoke_spec(spec: RunSpec) -> RunSpec:
    """``spec`` with its deadlines capped for a CI smoke step that must finish quickly."""

    def cap(value: float | None) -> float:
        return SMOKE_DEADLINE_SEC if value is None else min(value, SMOKE_DEADLINE_SEC)

    timeouts = spec.timeouts.model_copy(
        update={
            "agent_sec": cap(spec.timeouts.agent_sec),
            "grader_sec": cap(spec.timeouts.grader_sec),
        }
    )
    return spec.model_copy(update={"timeouts": timeouts})


def build_manifest(
    settings: RunSettings,
    spec: RunSpec,
    dataset: Dataset,
    rows: int,
    backend_identity: dict[str, Any],
) -> Manifest:
    """The run's identity: defining fields (blocking a resume when changed) and the rest."""
    workflow_config = spec.build_workflow_config()
    # a Harbor trial's image may have a grader's optional library that this host lacks
    grader_config = spec.build_grader_config(
        tolerate_missing_deps=settings.backend_name == "harbor"
    )
    judge = {} if spec.judge is None else {"judge_model": spec.judge.model}
    defining: dict[str, Any] = {
        "backend": settings.backend_name,
        "workflow": spec.workflow,
        "workflow_settings": workflow_config.settings,
        "grader": spec.grader,
        "grader_settings": grader_config.settings,
        **judge,  # only when there is one: run ids without a judge stay as they were
        "timeouts": spec.timeouts.model_dump(),
        "model": None if spec.llm is None else spec.llm.model,
        "dataset_sha256": dataset.content_sha256(),
        "rows": rows,
        "limit": spec.limit,
        "shard": spec.shard,
        # only when set: the run ids of runs without them stay what they were
        **({} if spec.rows is None else {"row_selection": spec.rows}),
        **({"shuffle_seed": spec.seed} if spec.shuffle else {}),
        "samples_per_row": spec.samples_per_row,
        # only what is not the default: the run ids of JSONL runs stay what they were
        **({} if dataset.format == "jsonl" else {"dataset_format": dataset.format}),
        **({} if dataset.columns.is_empty() else {"dataset_columns": _columns(dataset)}),
        # only when set: the run ids of runs without it stay what they were
        **({"grade_without_label": True} if spec.grade_without_label else {}),
        **backend_identity,
    }
    info: dict[str, Any] = {
        "osmo_run_version": __version__,
        "code_dir": str((spec.code_dir or Path.cwd()).resolve()),  # where regrade imports from
        "dataset_path": str(settings.dataset.resolve()),  # regrade finds it from anywhere
        "concurrency": workflow_config.concurrency.max_concurrent,
        "llm_base_url": None if spec.llm is None else spec.llm.base_url,
        **({} if spec.judge is None else {"judge_base_url": spec.judge.base_url}),
        "pass_threshold": spec.pass_threshold,
        "retries": spec.retries.model_dump(),
        "breaker": spec.breaker,  # when to stop for one repeated cause: never the results
        **settings.info,
    }
    return Manifest(defining=defining, info=info, dataset_name=settings.dataset.stem)


def _columns(dataset: Dataset) -> dict[str, Any]:
    """The column mapping as the manifest records it (and regrade reads it back)."""
    return {k: v for k, v in dataclasses.asdict(dataset.columns).items() if v is not None}


def with_model_server(
    plan: RunPlan, endpoint: LLMEndpoint, server: dict[str, Any], note: str
) -> RunPlan:
    """``plan`` once the model server it started answers at ``endpoint``: the endpoint of
    ``llm: embedded`` and of ``judge: embedded``, whichever asked for it (recorded in the
    manifest's info as ``llm_base_url`` / ``judge_base_url`` and ``llm_server``)."""
    llm, judge = plan.spec.llm, plan.spec.judge
    info = {**plan.manifest.info, "llm_server": server}
    changes: dict[str, Any] = {}
    if llm is not None and llm.embedded:
        info["llm_base_url"] = endpoint.base_url
        changes["llm"] = dataclasses.replace(endpoint, capture_tokens=llm.capture == "tokens")
    if judge is not None and judge.embedded:
        info["judge_base_url"] = endpoint.base_url
        changes["judge"] = endpoint
    manifest = dataclasses.replace(plan.manifest, info=info)
    return dataclasses.replace(plan, manifest=manifest, model_note=note, **changes)
