"""The contexts a workflow and a grader receive, and the ambient rollout context.

``RolloutContext`` is installed (a ``ContextVar``) around each rollout by the backend.
Code deep inside a workflow, such as an agent-framework integration, reaches it with
:func:`get_rollout_context` to find the model endpoint or to register the rollout's
:class:`SampleSource`.
"""

from __future__ import annotations

import contextvars
import errno
import json
import os
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.names import safe_name
from osmo_run.sdk.types import LLMUsage, Message, RolloutSample, validate_reward


@runtime_checkable
class SampleSource(Protocol):
    """Something that can hand over the rollout's sample when the workflow has finished.

    ``get_sample`` may be a plain method or ``async def`` (as in osmosis-ai): its result is
    awaited when it is awaitable. It runs under the workflow's deadline.
    """

    def get_sample(self) -> RolloutSample | Awaitable[RolloutSample | None] | None: ...


_CHAT_PATH = "/chat/completions"


def checked_base_url(url: str) -> str:
    """``url`` as an endpoint's base URL: an ``http://`` or ``https://`` URL with a host and
    a valid port. A URL given whole, ending in ``/chat/completions`` (no query), has that
    part dropped, since the path is appended to every call and would be doubled.

    Raises ``ValueError`` with a message for the person who wrote ``url``."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # a broken [IPv6] host
        raise ValueError(f"is not a URL: {exc} (got {url!r})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"must start with http:// or https:// (got {url!r})")
    if not parts.hostname:
        raise ValueError(f"names no host (got {url!r})")
    try:
        port = parts.port
    except ValueError:  # not a number, or not 0-65535
        port = 0
    if port == 0 and parts.netloc.rsplit("]", 1)[-1].count(":"):
        raise ValueError(f"has a port that is not a number from 1 to 65535 (got {url!r})")
    trimmed = url.rstrip("/")
    if trimmed.endswith(_CHAT_PATH) and not parts.query:
        return trimmed[: -len(_CHAT_PATH)]
    return url


@dataclass
class LLMEndpoint:
    """An OpenAI-compatible chat endpoint: ``base_url`` ends before ``/chat/completions``."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    capture_tokens: bool = False
    """Ask for and record each call's token ids and logprobs (the spec's
    ``llm.capture: tokens``; see :mod:`osmo_run.sdk.turns`)."""

    @property
    def chat_completions_url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass
class RolloutContext:
    """Ambient state of one rollout: its id, the model endpoint, one sample source, what
    the rollout spent on its model (``usage``), and its workflow ``deadline`` (a
    ``time.monotonic()`` instant, ``None`` for none), which per-call retries never pass.

    The grader phase runs in a context of its own: there ``llm`` is the judge endpoint and
    ``usage`` what the grader spent (the row's ``grader_usage``)."""

    rollout_id: str
    llm: LLMEndpoint | None = None
    _sample_source: SampleSource | None = field(default=None, repr=False)
    usage: LLMUsage = field(default_factory=LLMUsage)
    deadline: float | None = None
    warnings: list[str] = field(default_factory=list)
    """The row's ``warnings`` so far (see :meth:`warn`)."""
    last_call: tuple[object, object] | None = field(default=None, repr=False)
    """The rollout's latest answered model call: what was sent (its ``messages``, or the
    request's JSON bytes) and what came back (the reply message, or the response's JSON
    bytes), kept as they are and read only if the rollout fails without a sample
    (:func:`conversation_before_failure`)."""
    turns: list[dict[str, Any]] | None = field(default=None, repr=False)
    """The rollout's captured turns in call order (``llm.capture: tokens``; see
    :mod:`osmo_run.sdk.turns`), ``None`` before the first."""
    retrying: BaseException | None = None
    """The error a model call is retrying (set from its wait until its next answer): when
    the deadline passes meanwhile, the rollout fails with it, not with a timeout (on a
    busy machine a wait that was to end in time may not)."""

    def warn(self, message: str) -> None:
        """Record ``message`` in the row's ``warnings``: something the reader of the results
        should know that does not fail the rollout."""
        if message not in self.warnings:
            self.warnings.append(message)

    def record_llm_call(
        self, prompt_tokens: int | None, completion_tokens: int | None, seconds: float
    ) -> None:
        """Count one model call in this rollout's ``usage`` (the output row's ``usage``).

        ``chat_completion`` and the agent-framework integrations call this for every
        response; a client of your own can too. Missing token counts count as 0.
        """
        self.usage.add(prompt_tokens or 0, completion_tokens or 0, seconds)

    def record_call(self, sent: object, reply: object) -> None:
        """Remember one answered model call as the latest (see :attr:`last_call`): ``sent``
        the messages (a list) or the request's JSON body (bytes), ``reply`` the assistant
        message (a dict) or the response's JSON body (bytes). Costs no copy."""
        self.last_call = (sent, reply)

    def record_turn(self, turn: dict[str, Any]) -> None:
        """Keep one captured turn (:func:`osmo_run.sdk.turns.turn_of`) after the ones
        before it; a failed rollout keeps them too."""
        if self.turns is None:
            self.turns = []
        self.turns.append(turn)

    def record_retried_call(self) -> None:
        """Count one model call that needed at least one retry (``usage.retried_calls``)."""
        self.usage.retried_calls += 1

    @property
    def sample_source(self) -> SampleSource | None:
        return self._sample_source

    def register_sample_source(self, source: SampleSource) -> None:
        """Make ``source`` provide the sample; raises ``RuntimeError`` if one is registered."""
        if self._sample_source is not None:
            raise RuntimeError(
                "a sample source is already registered for this rollout; a rollout has exactly one"
            )
        self._sample_source = source


_current: contextvars.ContextVar[RolloutContext | None] = contextvars.ContextVar(
    "osmo_run_rollout_context", default=None
)


def get_rollout_context() -> RolloutContext:
    """Return the context of the rollout this code runs in; raises ``RuntimeError`` outside one."""
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError("no rollout is running here: get_rollout_context() works inside run()")
    return ctx


class _ArtifactsDirMixin:
    _artifacts_root: Path | None
    _artifacts_name: str | None
    _warnings: list[str]
    rollout_id: str

    @property
    def artifacts_dir(self) -> Path | None:
        """A directory for this rollout's files, created on first access; shared by the
        workflow and the grader of one rollout.

        ``None`` when the backend gives no artifacts location, or when the directory cannot
        be created or written (a read-only file system, a full disk): the rollout goes on,
        and the row's ``warnings`` say why there is no directory. Its name is the rollout's
        safe name (:mod:`osmo_run.sdk.names`), never the id itself: ids are data.
        """
        if self._artifacts_root is None:
            return None
        path = self._artifacts_root / (self._artifacts_name or safe_name(self.rollout_id))
        try:
            path.mkdir(parents=True, exist_ok=True)
            if not os.access(path, os.W_OK | os.X_OK):  # EROFS even for root
                raise PermissionError(errno.EACCES, "not writable", str(path))
        except OSError as exc:
            message = (
                f"artifacts_dir is unavailable ({path}: {exc.strerror or exc}); "
                "ctx.artifacts_dir was None"
            )
            if message not in self._warnings:
                self._warnings.append(message)
            return None
        return path


@dataclass
class AgentWorkflowContext(_ArtifactsDirMixin):
    """What ``AgentWorkflow.run`` receives. The label is deliberately absent."""

    prompt: list[Message]
    config: AgentWorkflowConfig
    metadata: dict[str, Any]
    rollout_id: str
    _artifacts_root: Path | None = field(default=None, repr=False)
    _artifacts_name: str | None = field(default=None, repr=False)
    _warnings: list[str] = field(default_factory=list, repr=False)

    @property
    def llm(self) -> LLMEndpoint | None:
        """The model endpoint from the run spec, or ``None`` when the spec names none."""
        ctx = _current.get()
        return None if ctx is None else ctx.llm


GRADER_INFO_KEY = "grader"
"""The key of the output row's ``info`` that holds the grader's explanation; the grader
phase owns it (a regrade replaces it)."""


@dataclass
class GraderContext(_ArtifactsDirMixin):
    """What ``Grader.grade`` receives. The grader reports one reward: it calls
    :meth:`set_reward`, assigns ``ctx.sample.reward``, or returns it (two different
    rewards are refused as a ``validation_error``); it says why through :meth:`explain`."""

    label: Any
    sample: RolloutSample | None
    metadata: dict[str, Any]
    config: GraderConfig
    rollout_id: str
    _artifacts_root: Path | None = field(default=None, repr=False)
    _artifacts_name: str | None = field(default=None, repr=False)
    reward: float | None = None
    explanation: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    _warnings: list[str] = field(default_factory=list, repr=False)

    def set_reward(self, value: float) -> None:
        """Record the reward; raises ``ValueError`` unless it is a finite number."""
        self.reward = validate_reward(value)
        if self.sample is not None:
            self.sample.reward = self.reward

    @property
    def judge(self) -> LLMEndpoint | None:
        """The judge endpoint from the run spec's ``judge`` section, or ``None`` when the
        spec names none. Inside ``grade``, ``chat_completion`` without an endpoint calls
        it, and every model call the grader makes (counted through the rollout context)
        is the row's ``grader_usage``, apart from the workflow's ``usage``."""
        ctx = _current.get()
        return None if ctx is None else ctx.llm

    def explain(self, text: str, **details: Any) -> None:
        """Say why the reward is what it is: what was compared with what.

        Kept in the output row as ``info["grader"]`` = ``{"explanation": text, **details}``,
        also when grading then fails, so whoever reads a failed or zero-reward row sees
        why. A later call replaces the text and adds to the details. Detail values should
        be JSON values (others are written with ``repr``).
        """
        self.explanation = str(text)
        self.details.update(details)

    def explained(self) -> dict[str, Any] | None:
        """What :meth:`explain` recorded, as stored in ``info["grader"]``; ``None`` if nothing."""
        if self.explanation is None and not self.details:
            return None
        return {"explanation": self.explanation, **self.details}


def artifacts_root_from_env() -> Path | None:
    """The artifacts root a sandbox runner was given through ``OSMO_RUN_ARTIFACTS_DIR``."""
    value = os.environ.get("OSMO_RUN_ARTIFACTS_DIR")
    return Path(value) if value else None


CALLS_BEFORE_FAILURE_KEY = "calls_before_failure"
"""The ``info`` key of a failed rollout's conversation as its last model call saw it."""


def conversation_before_failure(rollout: RolloutContext) -> dict[str, Any] | None:
    """``{"model_calls": n, "messages": [...]}``: the conversation the rollout's latest
    answered model call sent, with the reply it got, for a rollout that failed without a
    sample (the viewer shows it as its transcript); ``None`` when it made no readable call."""
    if rollout.last_call is None:
        return None
    sent, reply = rollout.last_call
    messages = _messages_sent(sent)
    if messages is None:
        return None
    answer = _reply_message(reply)
    return {
        "model_calls": rollout.usage.model_calls,
        "messages": [*messages, answer] if answer is not None else messages,
    }


def _messages_sent(sent: object) -> list[Any] | None:
    if isinstance(sent, bytes | bytearray):
        try:
            sent = json.loads(sent)
        except (ValueError, RecursionError):
            return None
        sent = sent.get("messages") if isinstance(sent, dict) else None
    return list(sent) if isinstance(sent, list) else None


def _reply_message(reply: object) -> dict[str, Any] | None:
    if isinstance(reply, bytes | bytearray):
        try:
            reply = json.loads(reply)
        except (ValueError, RecursionError):
            return None
        choices = reply.get("choices") if isinstance(reply, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        reply = first.get("message") if isinstance(first, dict) else None
    return dict(reply) if isinstance(reply, dict) else None
