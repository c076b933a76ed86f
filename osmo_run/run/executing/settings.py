"""What a run command hands to the run: its settings, and how to make its backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osmo_run.backends.base import ExecutionBackend
from osmo_run.errors import InputError
from osmo_run.run.configuring.spec import RunSpec
from osmo_run.run.reporting.gates import Gates
from osmo_run.run.writing.runfiles import RunPaths
from osmo_run.sdk.context import LLMEndpoint


@dataclass(frozen=True)
class RunSettings:
    """Everything a run needs once the spec and the flags are merged.

    ``output`` is the results file (default ``runs/<run id>/results.jsonl``). ``resume``
    continues a run; ``retry_errors`` (a set of categories, empty for all) reruns its
    failed rollouts. ``backend_identity`` holds the backend's result-defining settings
    (they enter the run id), ``info`` its informational ones. ``description`` is the first
    part of the line the display starts with (the command and its dataset).
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
    env_secrets: tuple[str, ...] = ()
    """Values from ``--env-file`` masked like API keys
    (:func:`~osmo_run.run.configuring.envfile.env_file_secrets`)."""
    spec_file: Path | None = None
    """``--spec``: read, so no output may be written over it."""
    env_file: Path | None = None
    """``--env-file``: read, so no output may be written over it."""

    def __post_init__(self) -> None:
        """Raise :class:`~osmo_run.errors.InputError` for flags that contradict each other."""
        if self.overwrite and (self.resume or self.retry_errors is not None):
            flag = "--resume" if self.resume else "--retry-errors"
            raise InputError(
                f"{flag} keeps the finished rows and --overwrite deletes them; pass one of them"
            )


@dataclass(frozen=True)
class BackendContext:
    """What a backend is made with once the run is planned: where the run's files go, the
    run id, and the model endpoint rollouts reach (the spec's, or the embedded model's
    server the run started; ``None`` without an ``llm`` section); ``judge`` likewise, the
    endpoint graders reach (the ``judge`` section)."""

    paths: RunPaths
    run_id: str
    llm: LLMEndpoint | None
    judge: LLMEndpoint | None = None
    secrets: tuple[str, ...] = ()
    """Values the run masks (:attr:`RunPlan.secrets`): never to be copied anywhere."""


BackendFactory = Callable[[BackendContext], ExecutionBackend]
"""Makes the run's backend; called once, after the run directory is ready."""
