"""Records that workflow authors, backends and the runner share.

Stdlib only (dataclasses), so the same module runs inside a Python 3.11 sandbox
with nothing installed.
"""

from __future__ import annotations

import enum
import math
import numbers
import os
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from osmo_run.sdk.exits import ExitedWithoutReturning
from osmo_run.sdk.messages import short_message
from osmo_run.sdk.names import safe_name

if TYPE_CHECKING:  # context.py imports this module
    from osmo_run.sdk.context import LLMEndpoint

Message = dict[str, Any]
"""One chat message: ``{"role": ..., "content": ...}`` plus optional tool-call fields."""


class RolloutStatus(enum.StrEnum):
    """Where a rollout is. ``SUCCESS``, ``FAILURE`` and ``CANCELLED`` are terminal."""

    QUEUED = "queued"
    RUNNING = "running"
    GRADING = "grading"
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (RolloutStatus.SUCCESS, RolloutStatus.FAILURE, RolloutStatus.CANCELLED)


class ErrorCategory(enum.StrEnum):
    """Why a rollout failed. One taxonomy for every backend, the histogram and the exit code."""

    TIMEOUT = "timeout"
    """The workflow or grader ran past its deadline (``TimeoutError`` included)."""
    VALIDATION_ERROR = "validation_error"
    """Bad data: ``ValueError``/``TypeError``/``AssertionError``, a bad return value or reward."""
    AGENT_ERROR = "agent_error"
    """Any other exception raised by the workflow or the grader."""
    RATE_LIMIT = "rate_limit"
    """The model endpoint answered 429."""
    MODEL_API_ERROR = "model_api_error"
    """The model endpoint failed (5xx, connection refused, bad response)."""
    INFRA_ERROR = "infra_error"
    """The execution environment failed: a sandbox did not build or start, the engine went away."""
    CANCELLED = "cancelled"
    """The run was interrupted before the rollout finished."""
    INTERNAL_ERROR = "internal_error"
    """A bug in osmo-run or a backend; please report it."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """The run's budget was spent and the rollout needed another model call (never sent)."""


class Phase(enum.StrEnum):
    """The part of a rollout that produced a result or an error."""

    SETUP = "setup"
    WORKFLOW = "workflow"
    GRADER = "grader"


def validate_reward(value: object) -> float:
    """Return ``value`` as a float; raise ``ValueError`` if it is not a finite real number
    (numpy's scalars count: anything whose ``float()`` is exact for a real number)."""
    if type(value) is float and math.isfinite(value):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"reward must be a number, got {type(value).__name__} {value!r:.80}")
    try:
        reward = float(value)
    except OverflowError:
        raise ValueError(f"reward must be finite, got {value!r:.40} (too large)") from None
    if not math.isfinite(reward):
        raise ValueError(f"reward must be finite, got {reward}")
    return reward


@dataclass(init=False)
class RolloutSample:
    """What a rollout produced, as the grader and the output file see it.

    ``reward`` is validated on every assignment (a finite number, or ``None``), wherever
    it happens (a sample source, a grader assigning ``ctx.sample.reward``,
    ``ctx.set_reward``): a bad one raises ``ValueError`` at that line. ``remove_sample``
    takes the sample out of the run's results: the row is recorded as not graded
    (``grader_skipped`` is :data:`SAMPLE_REMOVED`), never as a failure, and carries no
    reward.
    """

    messages: list[Message] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    reward: float | None = None
    remove_sample: bool = False

    def __init__(
        self,
        messages: list[Message] | None = None,
        metrics: dict[str, float] | None = None,
        reward: float | None = None,
        remove_sample: bool = False,
    ) -> None:
        # Straight into __dict__: one sample per rollout is made on the hot path, and reading
        # `reward` stays a plain attribute read (no descriptor), only assigning it is checked.
        state = self.__dict__
        state["messages"] = [] if messages is None else messages
        state["metrics"] = {} if metrics is None else metrics
        state["reward"] = None if reward is None else validate_reward(reward)
        state["remove_sample"] = remove_sample

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "reward" and value is not None:
            value = validate_reward(value)
        object.__setattr__(self, name, value)

    def set_reward(self, value: float) -> None:
        """Store ``value`` as the reward; raises ``ValueError`` unless it is a finite number."""
        self.reward = value

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"messages": self.messages, "metrics": self.metrics}
        if self.remove_sample:
            data["remove_sample"] = True
        return data


SAMPLE_REMOVED = "sample removed (remove_sample)"
"""``grader_skipped`` of a row whose sample set ``remove_sample``."""


@dataclass
class AgentWorkflowOutput:
    """What a workflow may return instead of a bare message list.

    ``info`` is kept in the output file but never shown to the grader.
    """

    messages: list[Message] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class LLMUsage:
    """What one rollout spent on its model: calls, tokens and seconds waiting for answers.

    Filled from the endpoint's responses (``usage.prompt_tokens`` and
    ``usage.completion_tokens``) by :func:`osmo_run.sdk.llm.chat_completion` and by the
    agent-framework integrations, through :meth:`RolloutContext.record_llm_call`.
    ``retried_calls`` counts the calls that were retried (HTTP 429, 5xx, a refused
    connection) before they answered or gave up.
    """

    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_sec: float = 0.0
    retried_calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def copy(self) -> LLMUsage:
        """A copy that does not change when this one goes on counting (an abandoned
        workflow may); as ``dataclasses.replace(self)``, without its per-field work (it runs
        once per rollout that called a model)."""
        copied = object.__new__(LLMUsage)
        copied.__dict__.update(self.__dict__)
        return copied

    def add(self, prompt_tokens: int, completion_tokens: int, seconds: float) -> None:
        """Count one model call."""
        self.model_calls += 1
        self.prompt_tokens += max(int(prompt_tokens), 0)
        self.completion_tokens += max(int(completion_tokens), 0)
        self.model_sec += max(float(seconds), 0.0)

    def merge(self, other: LLMUsage) -> None:
        """Count ``other``'s calls, tokens and seconds too."""
        self.model_calls += other.model_calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.model_sec += other.model_sec
        self.retried_calls += other.retried_calls

    def to_dict(self) -> dict[str, Any]:
        """The output record's ``usage`` object."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "model_calls": self.model_calls,
            "model_sec": round(self.model_sec, 6),
            "retried_calls": self.retried_calls,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> LLMUsage | None:
        """Read back :meth:`to_dict`; ``None`` for ``None`` or anything unreadable."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                model_calls=int(data.get("model_calls") or 0),
                prompt_tokens=int(data.get("prompt_tokens") or 0),
                completion_tokens=int(data.get("completion_tokens") or 0),
                model_sec=float(data.get("model_sec") or 0.0),
                retried_calls=int(data.get("retried_calls") or 0),
            )
        except (TypeError, ValueError):
            return None


@dataclass
class ExecutionRequest:
    """One dataset row, ready to run.

    ``id`` is the rollout's id, any non-empty string, kept exactly in every output and
    never used as a path: ``name`` is the safe name of its directories (artifacts, trials;
    see :mod:`osmo_run.sdk.names`), derived from ``id`` by ``safe_name`` when ``None``.
    A timeout of ``None`` means no deadline; zero or less, a deadline already passed (the
    phase is a ``timeout`` without running). A timeout that is not a finite number raises
    ``TypeError``/``ValueError`` at construction.
    """

    id: str
    prompt: list[Message]
    label: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    agent_timeout_sec: float | None = None
    grader_timeout_sec: float | None = None
    grade: bool = True
    name: str | None = None
    llm: LLMEndpoint | None = None
    """This rollout's own model endpoint, used instead of the run's (``osmo-run serve``:
    the trainer's URL and key from the request); ``None``: the run's."""

    @property
    def safe_name(self) -> str:
        """The rollout's file-system name: ``name``, or ``safe_name(id)`` without one."""
        return self.name if self.name is not None else safe_name(self.id)

    def __post_init__(self) -> None:
        agent, grader = self.agent_timeout_sec, self.grader_timeout_sec
        if type(agent) is float and type(grader) is float and agent - agent == grader - grader:
            return  # two finite floats (x - x is nan for nan and inf): every dataset row
        check_timeout(agent, "agent_timeout_sec")
        check_timeout(grader, "grader_timeout_sec")


def check_timeout(value: object, name: str) -> None:
    """Accept ``None`` (no deadline) or a finite number of seconds; raise ``TypeError`` or
    ``ValueError`` naming ``name`` otherwise.

    ``nan`` would silently disable a deadline and ``inf`` is spelt ``None``; zero and
    negative values are kept: a deadline that has already passed.
    """
    if value is None or (type(value) is float and math.isfinite(value)):
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds or None, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}; use None for no deadline")


@dataclass
class Timings:
    """Seconds spent in each phase of one rollout; ``None`` for a phase that did not run."""

    queued_sec: float = 0.0
    setup_sec: float | None = None
    workflow_sec: float | None = None
    grader_sec: float | None = None
    total_sec: float = 0.0
    dependencies_sec: float | None = None
    """Harbor: the part of ``setup_sec`` spent uploading the workflow's requirements into
    the trial (``None`` when none were uploaded: none needed, or the prebuilt image has
    them)."""

    def to_dict(self) -> dict[str, Any]:
        """The output record's ``timings`` object (``dependencies_sec`` only when set)."""
        timings: dict[str, Any] = {
            "queued_sec": round(self.queued_sec, 6),
            "setup_sec": self.setup_sec,
            "workflow_sec": self.workflow_sec,
            "grader_sec": self.grader_sec,
            "total_sec": round(self.total_sec, 6),
        }
        if self.dependencies_sec is not None:
            timings["dependencies_sec"] = round(self.dependencies_sec, 6)
        return timings

    @classmethod
    def from_dict(cls, data: object) -> Timings:
        """Read back :meth:`to_dict`; missing or unreadable values take their defaults."""
        if not isinstance(data, dict):
            return cls()

        def seconds(name: str) -> float | None:
            value = data.get(name)
            return float(value) if isinstance(value, int | float) else None

        return cls(
            queued_sec=seconds("queued_sec") or 0.0,
            setup_sec=seconds("setup_sec"),
            workflow_sec=seconds("workflow_sec"),
            grader_sec=seconds("grader_sec"),
            total_sec=seconds("total_sec") or 0.0,
            dependencies_sec=seconds("dependencies_sec"),
        )


_BUDGET_NAMES = frozenset({"BudgetExceededError"})
_RATE_LIMIT_NAMES = frozenset({"RateLimitError", "ModelThrottledException"})  # strands'
_MODEL_API_NAMES = frozenset(
    {"ModelAPIError", "APIError", "APIStatusError", "APIConnectionError", "InternalServerError"}
)


def categorize_exception(exc: BaseException) -> ErrorCategory:
    """Map an exception raised by a workflow or grader to its :class:`ErrorCategory`.

    ``TimeoutError`` → TIMEOUT; a class named ``RateLimitError`` anywhere in its MRO →
    RATE_LIMIT; model-client errors (``APIError``, ``APIConnectionError``, ...) →
    MODEL_API_ERROR; ``ValueError``/``TypeError``/``AssertionError`` → VALIDATION_ERROR;
    anything else → AGENT_ERROR. Names, not classes, so no client library is imported.
    A ``BudgetExceededError``, or an error a model client raised because of one (openai
    wraps what its transport raises in ``APIConnectionError``), → BUDGET_EXCEEDED.
    """
    if _budget_spent_in(exc):
        return ErrorCategory.BUDGET_EXCEEDED
    if isinstance(exc, TimeoutError):
        return ErrorCategory.TIMEOUT
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _RATE_LIMIT_NAMES:
        return ErrorCategory.RATE_LIMIT
    if names & _MODEL_API_NAMES:
        return ErrorCategory.MODEL_API_ERROR
    if isinstance(exc, ValueError | TypeError | AssertionError):
        return ErrorCategory.VALIDATION_ERROR
    return ErrorCategory.AGENT_ERROR


def _budget_spent_in(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was caused by, a ``BudgetExceededError`` (a short chain: a
    client wraps an error once or twice)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if {cls.__name__ for cls in type(seen).__mro__} & _BUDGET_NAMES:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


_SDK_DIR = str(Path(__file__).parent) + os.sep
"""Frames in here are the SDK's checks, not the place a bad value came from."""


def describe_exception(exc: BaseException) -> str:
    """``"Type: message (at file:line in func)"``, naming where the exception was raised:
    the innermost frame outside this SDK, so a bad value handed to an SDK check (a reward
    assigned in ``get_sample``) names the line that handed it over. An
    :class:`~osmo_run.sdk.exits.ExitedWithoutReturning` is its message alone."""
    if isinstance(exc, ExitedWithoutReturning):  # says what happened; its type says no more
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if frames:
        outside = [f for f in frames if not f.filename.startswith(_SDK_DIR)]
        where = (outside or frames)[-1]
        text += f" (at {where.filename}:{where.lineno} in {where.name})"
    return text


@dataclass(frozen=True, slots=True)
class BackendDetails:
    """What a backend (and the run) adds to a result about where the rollout ran; written
    as the output record's ``backend`` object, holding only the fields that are set.

    ``trial_name``, ``trial_id`` and ``environment`` name a Harbor trial; ``trial_dir`` is
    the trial directory the backend kept (a failed row's, for debugging); ``error_log`` the
    file holding the full text of an error whose message was cut to one line
    (:mod:`osmo_run.run.writing.full_errors`). ``other`` keeps keys this version does not know (a
    record written by another version, or a known key holding something else than a
    string), so a record read and written again keeps them. Immutable (one empty instance,
    :data:`NO_BACKEND_DETAILS`, serves every result with none): change one with
    ``dataclasses.replace``.
    """

    trial_name: str | None = None
    trial_id: str | None = None
    environment: str | None = None
    trial_dir: str | None = None
    error_log: str | None = None
    other: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def to_dict(self) -> dict[str, Any]:
        """The record's ``backend`` object: the fields that are set, then ``other``."""
        if self is NO_BACKEND_DETAILS:  # most results: once per row on the hot path
            return {}
        data: dict[str, Any] = {}
        for name in _BACKEND_FIELDS:
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        if self.other:
            data.update(self.other)
        return data

    @classmethod
    def from_dict(cls, data: object) -> BackendDetails:
        """Read a record's ``backend`` value back; anything but an object (an old or
        hand-edited record) reads as no details, never an error."""
        if not isinstance(data, dict) or not data:
            return NO_BACKEND_DETAILS
        known: dict[str, str] = {}
        other: dict[str, Any] = {}
        for key, value in data.items():
            if key in _BACKEND_FIELDS and isinstance(value, str):
                known[key] = value
            else:
                other[key] = value
        return cls(**known, other=MappingProxyType(other))

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled and deep-copied as its record form (a read-only mapping pickles not)."""
        return BackendDetails.from_dict, (self.to_dict(),)


_BACKEND_FIELDS = tuple(f.name for f in fields(BackendDetails) if f.name != "other")
NO_BACKEND_DETAILS = BackendDetails()
"""The details of a result no backend added to (shared: :class:`BackendDetails` is immutable)."""


def _enum_value(value: enum.Enum | None) -> str | None:
    return None if value is None else str(value.value)


@dataclass
class ExecutionResult:
    """The outcome of one rollout, or of its workflow phase when grading is still to come.

    ``status`` is ``GRADING`` only in the result handed to ``on_workflow_complete`` when a
    grader will run next; otherwise it is terminal. A ``FAILURE`` or ``CANCELLED`` result
    carries ``error_category``, ``error_message`` and ``error_phase`` (build one with
    :meth:`failure` or :meth:`from_exception`, or turn one into it with :meth:`fail`):
    ``error_message`` is the first meaningful line of what went wrong
    (:func:`~osmo_run.sdk.messages.short_message`) and ``error_detail`` the full text when
    that line was cut from a longer one (``None`` otherwise); the run keeps the full text in
    a file the row's ``backend.error_log`` names, never in the row. ``grader_skipped``
    says why a successful rollout was not graded. ``backend`` holds what the backend
    adds (:class:`BackendDetails`: trial id, kept trial directory, full error file), written
    to the output file. ``usage`` is what the workflow
    spent on its model (``None`` when it made no model call that reported usage);
    ``grader_usage`` what the grader spent on its own (a judge model), counted apart.
    ``warnings`` says what
    went wrong without failing the rollout (telemetry dropped, no artifacts directory, a
    deadline extended while another row blocked the event loop), one sentence each.
    """

    rollout_id: str
    status: RolloutStatus
    sample: RolloutSample | None = None
    error_category: ErrorCategory | None = None
    error_message: str | None = None
    error_phase: Phase | None = None
    error_detail: str | None = None
    grader_skipped: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    timings: Timings = field(default_factory=Timings)
    backend: BackendDetails = NO_BACKEND_DETAILS
    usage: LLMUsage | None = None
    grader_usage: LLMUsage | None = None
    warnings: list[str] = field(default_factory=list)
    turns: list[dict[str, Any]] | None = None
    """The workflow's captured model calls in order (``llm.capture: tokens``; see
    :mod:`osmo_run.sdk.turns`), ``None`` when nothing was captured. Written to the run's
    turns file, never in the result record."""

    @classmethod
    def failure(
        cls,
        rollout_id: str,
        category: ErrorCategory,
        message: str | None,
        phase: Phase | None = Phase.SETUP,
        sample: RolloutSample | None = None,
    ) -> ExecutionResult:
        """A failed rollout; status ``CANCELLED`` when ``category`` is ``CANCELLED``. Its
        ``error_message`` is ``message`` cut to its first meaningful line (see :meth:`fail`)."""
        result = cls(rollout_id=rollout_id, status=RolloutStatus.FAILURE, sample=sample)
        result.fail(category, message, phase)
        return result

    def fail(self, category: ErrorCategory, message: str | None, phase: Phase | None) -> None:
        """Make this result the failure ``category`` in ``phase`` (status ``CANCELLED`` for
        ``CANCELLED``), its message the first meaningful line of ``message``
        (:func:`~osmo_run.sdk.messages.short_message`) and ``error_detail`` the whole of
        ``message`` when that line was cut from it. Every failure's message is set here."""
        cancelled = category is ErrorCategory.CANCELLED
        self.status = RolloutStatus.CANCELLED if cancelled else RolloutStatus.FAILURE
        self.error_category = category
        self.error_phase = phase
        short = None if message is None else short_message(message)
        self.error_message = short
        full = None if message is None else message.strip()
        self.error_detail = full if short is not None and short != full else None

    @classmethod
    def from_exception(
        cls,
        rollout_id: str,
        exc: BaseException,
        phase: Phase,
        sample: RolloutSample | None = None,
    ) -> ExecutionResult:
        """The failure ``exc`` stands for: its category (:func:`categorize_exception`) and a
        message naming it and where it was raised (:func:`describe_exception`)."""
        return cls.failure(
            rollout_id, categorize_exception(exc), describe_exception(exc), phase, sample
        )

    @property
    def reward(self) -> float | None:
        return None if self.sample is None else self.sample.reward

    @property
    def ok(self) -> bool:
        return self.status is RolloutStatus.SUCCESS

    @property
    def extra(self) -> dict[str, Any]:
        """The former name of :attr:`backend`, as the record's ``backend`` object (a copy:
        change :attr:`backend` itself)."""
        return self.backend.to_dict()

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON data: the output record's result fields (see
        :mod:`osmo_run.run.writing.records`), and what sandbox runners hand back to the host."""
        sample = self.sample
        return {
            "rollout_id": self.rollout_id,
            "status": self.status.value,
            "reward": None if sample is None else sample.reward,
            "error_category": _enum_value(self.error_category),
            "error_message": self.error_message,
            "error_phase": _enum_value(self.error_phase),
            "error_detail": self.error_detail,
            "grader_skipped": self.grader_skipped,
            "timings": self.timings.to_dict(),
            "sample": None if sample is None else sample.to_dict(),
            "info": self.info,
            "backend": self.backend.to_dict(),
            "usage": None if self.usage is None else self.usage.to_dict(),
            "grader_usage": None if self.grader_usage is None else self.grader_usage.to_dict(),
            "warnings": self.warnings,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionResult:
        """Read back :meth:`to_dict` (or a whole output record); raises ``KeyError`` or
        ``ValueError`` when ``data`` is not such a result."""
        sample_data = data.get("sample")
        sample = None
        if isinstance(sample_data, dict):
            sample = RolloutSample(
                messages=list(sample_data.get("messages") or []),
                metrics=dict(sample_data.get("metrics") or {}),
                reward=data.get("reward"),
                remove_sample=bool(sample_data.get("remove_sample")),
            )
        category, phase = data.get("error_category"), data.get("error_phase")
        return cls(
            rollout_id=str(data["rollout_id"]),
            status=RolloutStatus(data["status"]),
            sample=sample,
            error_category=ErrorCategory(category) if category else None,
            error_message=data.get("error_message"),
            error_phase=Phase(phase) if phase else None,
            error_detail=data.get("error_detail"),
            grader_skipped=data.get("grader_skipped"),
            info=dict(data.get("info") or {}),
            timings=Timings.from_dict(data.get("timings")),
            backend=BackendDetails.from_dict(data.get("backend")),
            usage=LLMUsage.from_dict(data.get("usage")),
            grader_usage=LLMUsage.from_dict(data.get("grader_usage")),
            warnings=[str(w) for w in data.get("warnings") or []],
        )
