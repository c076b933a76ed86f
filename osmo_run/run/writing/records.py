"""The output file's line format: one :class:`OutputRecord` per finished row.

Lines are written from :func:`record_dict` and :func:`record_line` (built in one step,
encoded by one prebuilt encoder: they run once per row on the hot path) and read back
through :class:`OutputRecord`, which a test keeps in step with the writer.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from osmo_run.sdk.names import rollout_name, safe_name
from osmo_run.sdk.types import ExecutionResult

SCHEMA_VERSION = 1


class TimingsRecord(BaseModel):
    queued_sec: float
    setup_sec: float | None = None
    workflow_sec: float | None = None
    grader_sec: float | None = None
    total_sec: float
    dependencies_sec: float | None = None
    """Harbor only: seconds of ``setup_sec`` spent uploading the workflow's requirements."""


class SampleRecord(BaseModel):
    messages: list[dict[str, Any]]
    metrics: dict[str, float]
    remove_sample: bool = False
    """Written only when set: the rollout took its sample out of the results."""


class UsageRecord(BaseModel):
    """What the rollout's workflow (``usage``) or grader (``grader_usage``) spent on its
    model, from the endpoint's responses."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    model_calls: int
    model_sec: float
    retried_calls: int = 0
    """Calls retried after HTTP 429, 5xx or a refused connection (0 in older files)."""


class AttemptRecord(BaseModel):
    """An earlier try of the same rollout that failed and was retried."""

    attempt: int
    error_category: str | None
    error_message: str | None
    error_phase: str | None
    total_sec: float


class OutputRecord(BaseModel):
    """One finished rollout (a row, or one sample of it) as stored in the output JSONL."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1]
    row_id: str
    rollout_id: str
    safe_name: str | None = None
    """The rollout's file-system name (its ``artifacts/`` directory; see
    :mod:`osmo_run.sdk.names`): ids are data and never paths. Absent in older files."""
    row_index: int
    sample_index: int
    line: int
    attempt: int
    attempts: list[AttemptRecord]
    status: Literal["success", "failure", "cancelled"]
    reward: float | None
    error_category: str | None
    error_message: str | None
    error_phase: Literal["setup", "workflow", "grader"] | None
    grader_skipped: str | None
    timings: TimingsRecord
    sample: SampleRecord | None
    info: dict[str, Any]
    backend: dict[str, Any]
    usage: UsageRecord | None = None
    """``None`` when the workflow made no model call that reported usage."""
    grader_usage: UsageRecord | None = None
    """The grader's model calls (a judge), apart from the workflow's; ``None`` when it
    made none."""
    warnings: list[str] = []
    """What went wrong without failing the rollout, one sentence each."""
    served: bool = False
    """``osmo-run serve``: the rollout came from a trainer over HTTP (absent otherwise)."""
    lease_sha256: str | None = None
    """``osmo-run serve``: the SHA-256 of the rollout's polling-lease token (never the
    token), so a restarted server checks the trainer's token against it."""
    request: dict[str, Any] | None = None
    """``osmo-run serve``: the trainer's request (label, metadata, grade, timeouts, model
    URL), without its prompt (the sample holds it) or its model key."""
    recorded_unix: float | None = None
    """``osmo-run serve``: when the line was written (seconds since the epoch), so a
    restarted server keeps the answer only for what is left of its retention."""


def record_problem(record: object) -> str | None:
    """Why a decoded results line is not an :class:`OutputRecord` (strictly: ``"0.5"`` is
    not a number, and a reward must be finite), naming its first bad field; ``None`` when it
    is one. Every reader of a results file (report, resume, regrade, the viewer) keeps only
    lines this passes, so no hand-edited field reaches their arithmetic."""
    if not isinstance(record, dict):
        return "not a JSON object"
    try:
        _RECORD_VALIDATOR.validate_python(record, strict=True)
    except ValidationError as exc:
        problems = exc.errors(include_url=False, include_input=False)
        first = problems[0]
        where = ".".join(str(part) for part in first["loc"]) or "record"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"{where}: {first['msg']}{more}"
    reward = record.get("reward")
    if isinstance(reward, float) and not math.isfinite(reward):
        return f"reward: {reward} is not a finite number"
    return None


_RECORD_VALIDATOR = OutputRecord.__pydantic_validator__


def attempt_dict(attempt: int, result: ExecutionResult) -> dict[str, Any]:
    """An :class:`AttemptRecord` for a failed try that is retried: the error fields of
    ``result.to_dict()``."""
    data = result.to_dict()
    return {
        "attempt": attempt,
        "error_category": data["error_category"],
        "error_message": data["error_message"],
        "error_phase": data["error_phase"],
        "total_sec": data["timings"]["total_sec"],
    }


def attempts_before_rerun(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The :class:`AttemptRecord` list a recorded rollout that runs again starts with (a
    rerun by ``--retry-errors``, a cancelled row resumed): the tries it had recorded, then
    the recorded one itself, as an in-run retry would have listed them."""
    earlier = [dict(a) for a in record.get("attempts") or [] if isinstance(a, dict)]
    earlier.append(
        {
            "attempt": int(record.get("attempt") or len(earlier) + 1),
            "error_category": record.get("error_category"),
            "error_message": record.get("error_message"),
            "error_phase": record.get("error_phase"),
            "total_sec": float((record.get("timings") or {}).get("total_sec") or 0.0),
        }
    )
    return earlier


def record_dict(
    row_id: str,
    row_index: int,
    line: int,
    result: ExecutionResult,
    sample_index: int = 0,
    attempt: int = 1,
    attempts: list[dict[str, Any]] | None = None,
    safe_name: str | None = None,
) -> dict[str, Any]:
    """The JSON object for one finished rollout (see :class:`OutputRecord`): where it sits
    in the dataset, its safe name (default: derived from the row id and sample), its
    attempts, and the fields of ``result.to_dict()`` but ``rollout_id`` (placed after the
    row id) and ``error_detail`` (the full text goes to the file ``backend.error_log``
    names). ``ExecutionResult.from_dict`` reads a record back into a result.

    Built in one step from ``result``'s fields (it runs once per row on the hot path);
    a test keeps its keys and values in step with ``ExecutionResult.to_dict``."""
    rollout_id = result.rollout_id
    sample = result.sample
    category, phase = result.error_category, result.error_phase
    usage, grader_usage = result.usage, result.grader_usage
    return {
        "schema_version": SCHEMA_VERSION,
        "row_id": row_id,
        "rollout_id": rollout_id,
        "safe_name": safe_name or _derived_name(row_id, rollout_id, sample_index),
        "row_index": row_index,
        "sample_index": sample_index,
        "line": line,
        "attempt": attempt,
        "attempts": attempts or [],
        "status": result.status.value,
        "reward": None if sample is None else sample.reward,
        "error_category": None if category is None else category.value,
        "error_message": result.error_message,
        "error_phase": None if phase is None else phase.value,
        "grader_skipped": result.grader_skipped,
        "timings": result.timings.to_dict(),
        "sample": None if sample is None else sample.to_dict(),
        "info": result.info,
        "backend": result.backend.to_dict(),
        "usage": None if usage is None else usage.to_dict(),
        "grader_usage": None if grader_usage is None else grader_usage.to_dict(),
        "warnings": result.warnings,
    }


def _derived_name(row_id: str, rollout_id: str, sample_index: int) -> str:
    """The name :func:`osmo_run.run.executing.runner.work_items` gives a rollout: the row's safe
    name, with ``~k`` when the row runs several times (its rollout id is then not the row id)."""
    sample = None if rollout_id == row_id else sample_index
    return rollout_name(safe_name(row_id), sample)


def record_safe_name(record: dict[str, Any]) -> str:
    """The safe name of a recorded rollout: its ``safe_name``, or (files written before
    it was recorded) the one derived from its ids."""
    name = record.get("safe_name")
    if isinstance(name, str) and name:
        return name
    row_id = str(record.get("row_id"))
    rollout_id = str(record.get("rollout_id", row_id))
    return _derived_name(row_id, rollout_id, int(record.get("sample_index") or 0))


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=repr, check_circular=False)
"""Built once (``json.dumps`` with these options builds a new encoder for every row), and
without the check for cycles, which costs a set lookup per list and dict on every row: a
cycle in a result (a workflow's metrics or info holding themselves) recurses to Python's
depth limit instead, and :func:`record_line` then encodes again with the check."""

_CHECKING_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=repr)
"""Says ``Circular reference detected`` for a cycle, where the fast one hits the depth
limit: the message the row's validation error quotes."""


def record_line(record: dict[str, Any]) -> str:
    """Serialize a record as one line; values JSON cannot hold are written with ``repr``.

    Raises ``ValueError`` for NaN, infinities and a cycle (``Circular reference
    detected``), ``TypeError`` for a key that is not a string, number or bool, and
    ``RecursionError`` for a structure nested deeper than Python's depth limit."""
    try:
        return _ENCODER.encode(record)
    except RecursionError:  # a cycle, or nesting too deep: the checking encoder tells which
        return _CHECKING_ENCODER.encode(record)
