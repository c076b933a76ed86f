"""Command-line values laid over a run spec, field by field.

Each override names the spec field it sets, so a flag can be followed from the command line
to where it acts: ``--concurrency`` is :attr:`SpecOverrides.concurrency` is
``RunSpec.concurrency``. ``None`` leaves the spec's value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from osmo_run.errors import SpecError
from osmo_run.run.configuring.field_errors import format_validation_error
from osmo_run.run.configuring.spec import RunSpec
from osmo_run.run.configuring.spec_file import load_spec


@dataclass(frozen=True)
class HarborOverrides:
    """Flags of ``osmo-run harbor`` that set ``RunSpec.harbor`` fields of the same names."""

    task_dir: Path | None = None
    tasks_root: Path | None = None
    env: str | None = None
    environment_import_path: str | None = None
    environment_kwargs: dict[str, Any] | None = None
    prebuild: bool | None = None
    keep_trials: bool | None = None
    trials_dir: Path | None = None
    preflight_timeout_sec: float | None = None


@dataclass(frozen=True)
class SpecOverrides:
    """Flags that set spec fields: top-level fields of the same names, ``agent_sec`` and
    ``grader_sec`` in ``timeouts``, and :class:`HarborOverrides` in ``harbor``."""

    workflow: str | None = None
    grader: str | None = None
    code_dir: Path | None = None
    output: Path | None = None
    concurrency: int | None = None
    limit: int | None = None
    bad_rows: str | None = None
    samples_per_row: int | None = None
    shard: str | None = None
    rows: str | None = None
    shuffle: bool | None = None
    seed: int | None = None
    isolation: str | None = None
    agent_sec: float | None = None
    grader_sec: float | None = None
    breaker: int | bool | None = None
    """``--breaker K`` (a number) or ``--no-breaker`` (``False``): ``RunSpec.breaker``."""
    dataset_format: str | None = None
    """``--dataset-format``: ``dataset.format``."""
    budget_tokens: int | None = None
    """``--budget-tokens``: ``budget.tokens``."""
    budget_usd: float | None = None
    """``--budget-usd``: ``budget.usd``."""
    harbor: HarborOverrides = field(default_factory=HarborOverrides)

    def top_level(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "grader": self.grader,
            "code_dir": self.code_dir,
            "output": self.output,
            "concurrency": self.concurrency,
            "limit": self.limit,
            "bad_rows": self.bad_rows,
            "samples_per_row": self.samples_per_row,
            "shard": self.shard,
            "rows": self.rows,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "isolation": self.isolation,
            "breaker": self.breaker,
        }


def _given(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def spec_with_overrides(spec_path: Path | None, overrides: SpecOverrides) -> RunSpec:
    """The spec file (or, without one, an empty spec) with ``overrides`` laid over it.

    Raises :class:`SpecError` naming every invalid field, and when there is neither a spec
    file nor a workflow to run.
    """
    if spec_path is None and overrides.workflow is None:
        raise SpecError(
            "give a run spec with --spec FILE, or a workflow with --workflow module:Class"
        )
    base = load_spec(spec_path) if spec_path is not None else None
    data = base.model_dump(exclude_unset=True) if base is not None else {}
    data.update(_given(overrides.top_level()))
    timeouts = {"agent_sec": overrides.agent_sec, "grader_sec": overrides.grader_sec}
    data["timeouts"] = {**(data.get("timeouts") or {}), **_given(timeouts)}
    dataset = {"format": overrides.dataset_format}
    data["dataset"] = {**(data.get("dataset") or {}), **_given(dataset)}
    budget = {"tokens": overrides.budget_tokens, "usd": overrides.budget_usd}
    data["budget"] = {**(data.get("budget") or {}), **_given(budget)}
    harbor = vars(overrides.harbor)
    data["harbor"] = {**(data.get("harbor") or {}), **_given(harbor)}
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        source = "command line" if spec_path is None else f"{spec_path} + command line"
        raise SpecError(format_validation_error(source, exc, RunSpec)) from None
