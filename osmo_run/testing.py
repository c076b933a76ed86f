"""Test helpers for workflow and grader authors, and a scripted backend for code that drives
backends.

Run one workflow or grader on a prompt and a label, without a dataset, a spec or the
runner, exactly as a rollout runs it (deadlines, error categories, the sample source,
usage)::

    from osmo_run.testing import run_rollout, run_workflow

    async def test_my_workflow_answers() -> None:
        result = await run_workflow(MyWorkflow, "What is 2+2?")
        assert result.ok and result.sample.messages[-1]["content"] == "4"

    async def test_my_grader_scores_the_answer() -> None:
        result = await run_rollout(MyWorkflow, "What is 2+2?", label="4", grader=MyGrader)
        assert result.reward == 1.0

Failures come back as results (``result.error_category``, ``error_message``), never as
exceptions, as they do in a run. :class:`FakeBackend` answers requests from a function, for
testing a runner, a scheduler or a harness without running any workflow.

:class:`MockModel` answers a workflow's (or a judge's) model calls from a script, with no
network: pass it as ``model=`` and the calls go through the same pooled client, per-call
retries and usage accounting as in a run, :func:`~osmo_run.sdk.llm.chat_completion` and
both agent integrations alike::

    model = MockModel([MockToolCall("add", {"a": 17, "b": 25}), "The sum is 42."])
    result = run_workflow_sync(MyAgentWorkflow, "What is 17 + 25?", model=model)
    assert model.call_count == 2 and model.calls[1].messages[-1]["role"] == "tool"

``run_workflow_sync``, ``run_grader_sync`` and ``run_rollout_sync`` are the same helpers
for plain (not async) tests.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlsplit

from osmo_run.backends.base import ExecutionBackend, ResultCallback
from osmo_run.backends.local import LocalBackend
from osmo_run.sdk.config import AgentWorkflowConfig, ConcurrencyConfig, GraderConfig
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.model_clients import ModelClients, reset_model_clients, use_model_clients
from osmo_run.sdk.model_http import HTTPAnswer, ModelTransport
from osmo_run.sdk.rollout import run_grader_phase, run_workflow_phase
from osmo_run.sdk.types import (
    ExecutionRequest,
    ExecutionResult,
    Message,
    RolloutSample,
    RolloutStatus,
)
from osmo_run.sdk.workflow import AgentWorkflow, Grader

__all__ = [
    "FakeBackend",
    "MockCall",
    "MockError",
    "MockModel",
    "MockReply",
    "MockToolCall",
    "make_request",
    "run_grader",
    "run_grader_sync",
    "run_rollout",
    "run_rollout_sync",
    "run_workflow",
    "run_workflow_sync",
]

Prompt = str | list[Message]
"""A prompt: one user message as a string, or a message list."""


def make_request(
    prompt: Prompt,
    *,
    label: Any = None,
    metadata: dict[str, Any] | None = None,
    rollout_id: str = "test",
    agent_timeout_sec: float | None = 60.0,
    grader_timeout_sec: float | None = 60.0,
) -> ExecutionRequest:
    """An :class:`ExecutionRequest` as a dataset row would give it."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    return ExecutionRequest(
        id=rollout_id,
        prompt=list(messages),
        label=label,
        metadata=dict(metadata or {}),
        agent_timeout_sec=agent_timeout_sec,
        grader_timeout_sec=grader_timeout_sec,
    )


async def run_workflow(
    workflow: type[AgentWorkflow] | AgentWorkflow,
    prompt: Prompt,
    *,
    metadata: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    llm: LLMEndpoint | None = None,
    timeout_sec: float | None = 60.0,
    artifacts_dir: Path | None = None,
    model: ModelTransport | None = None,
) -> ExecutionResult:
    """Run ``workflow``'s phase of one rollout: SUCCESS with its sample, or FAILURE with the
    error category, message and phase a run would record. ``llm`` is what ``ctx.llm``
    returns; ``artifacts_dir`` the root of ``ctx.artifacts_dir``.

    The model calls go through a run's pooled model clients, closed on return; ``model``
    (a :class:`MockModel`) answers them instead of the network, and is ``ctx.llm`` when
    ``llm`` is not given."""
    request = make_request(prompt, metadata=metadata, agent_timeout_sec=timeout_sec)
    config = AgentWorkflowConfig(settings=dict(settings or {}))
    llm = _endpoint_of(llm, model)
    clients = ModelClients(config.concurrency.max_concurrent, transport=model)
    token = use_model_clients(clients)
    try:
        return await run_workflow_phase(request, workflow, config, llm, artifacts_dir)
    finally:
        reset_model_clients(token)
        await clients.aclose()


async def run_grader(
    grader: type[Grader] | Grader,
    sample: RolloutSample | list[Message],
    label: Any,
    *,
    metadata: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    timeout_sec: float | None = 60.0,
    artifacts_dir: Path | None = None,
    judge: LLMEndpoint | None = None,
    model: ModelTransport | None = None,
) -> ExecutionResult:
    """Grade ``sample`` (or a message list) against ``label``: SUCCESS with the reward on
    ``result.reward``, or FAILURE in the grader phase. ``judge`` is what ``ctx.judge``
    returns (the spec's ``judge`` section); the grader's model calls are
    ``result.grader_usage``. ``model`` (a :class:`MockModel`) answers the judge's calls,
    and is ``ctx.judge`` when ``judge`` is not given."""
    if not isinstance(sample, RolloutSample):
        sample = RolloutSample(messages=list(sample))
    request = make_request(
        sample.messages, label=label, metadata=metadata, grader_timeout_sec=timeout_sec
    )
    graded = ExecutionResult(request.id, RolloutStatus.SUCCESS, sample=sample)
    config = GraderConfig(settings=dict(settings or {}))
    judge = _endpoint_of(judge, model)
    clients = ModelClients(ConcurrencyConfig().max_concurrent, transport=model)
    token = use_model_clients(clients)
    try:
        return await run_grader_phase(request, graded, grader, config, artifacts_dir, judge)
    finally:
        reset_model_clients(token)
        await clients.aclose()


async def run_rollout(
    workflow: type[AgentWorkflow] | AgentWorkflow,
    prompt: Prompt,
    *,
    label: Any = None,
    grader: type[Grader] | Grader | None = None,
    metadata: dict[str, Any] | None = None,
    workflow_settings: dict[str, Any] | None = None,
    grader_settings: dict[str, Any] | None = None,
    llm: LLMEndpoint | None = None,
    agent_timeout_sec: float | None = 60.0,
    grader_timeout_sec: float | None = 60.0,
    artifacts_dir: Path | None = None,
    judge: LLMEndpoint | None = None,
    model: ModelTransport | None = None,
) -> ExecutionResult:
    """One whole rollout through :class:`~osmo_run.backends.local.LocalBackend`: the
    workflow, then the grader when one is given and ``label`` is not ``None`` (otherwise
    ``result.grader_skipped`` says why). The final result, as the output row holds it.
    ``llm`` is the workflow's endpoint, ``judge`` the grader's; ``model`` (a
    :class:`MockModel`) answers both's calls through the backend's model clients, and is
    the endpoint of each not given."""
    llm, judge = _endpoint_of(llm, model), _endpoint_of(judge, model)
    backend = LocalBackend(
        workflow,
        AgentWorkflowConfig(settings=dict(workflow_settings or {})),
        grader,
        GraderConfig(settings=dict(grader_settings or {})),
        llm=llm,
        judge=judge,
        artifacts_root=artifacts_dir,
    )
    backend.model_clients.transport = model
    request = make_request(
        prompt,
        label=label,
        metadata=metadata,
        agent_timeout_sec=agent_timeout_sec,
        grader_timeout_sec=grader_timeout_sec,
    )
    results: list[ExecutionResult] = []
    try:
        await backend.execute(request, results.append)
    finally:
        await backend.aclose()
    return results[-1]


Respond = Callable[[ExecutionRequest], ExecutionResult | Awaitable[ExecutionResult | None] | None]


class FakeBackend(ExecutionBackend):
    """A backend whose results come from ``respond(request)``: a result (delivered as the
    final one), ``None`` (no result at all: a backend bug, as the runner must survive), an
    awaitable of either, or an exception (raised from :meth:`execute`, like a crashing
    backend). The default answers every request with a successful empty sample.

    ``requests`` lists what was executed, in order; ``peak_in_flight`` the most calls that
    were in :meth:`execute` at once, at most ``max_concurrency`` (``0``: no limit).
    """

    def __init__(self, respond: Respond | None = None, max_concurrency: int = 4) -> None:
        self._respond = respond or _succeed
        self._limit = max_concurrency
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.requests: list[ExecutionRequest] = []
        self.in_flight = 0
        self.peak_in_flight = 0

    @property
    def max_concurrency(self) -> int:
        return self._limit

    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None:
        if self._slots is None:
            await self._answer(request, on_workflow_complete)
            return
        async with self._slots:
            await self._answer(request, on_workflow_complete)

    async def _answer(self, request: ExecutionRequest, deliver: ResultCallback) -> None:
        self.requests.append(request)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            answer = self._respond(request)
            if inspect.isawaitable(answer):
                answer = await answer
        finally:
            self.in_flight -= 1
        if answer is not None:
            deliver(answer)


def _succeed(request: ExecutionRequest) -> ExecutionResult:
    return ExecutionResult(request.id, RolloutStatus.SUCCESS, sample=RolloutSample())


P = ParamSpec("P")
T = TypeVar("T")


def _sync(helper: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    @functools.wraps(helper)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(helper(*args, **kwargs))
        raise RuntimeError(
            f"{helper.__name__}_sync runs its own event loop: in an async test, "
            f"`await {helper.__name__}(...)` instead"
        )

    run.__name__ = run.__qualname__ = f"{helper.__name__}_sync"
    run.__doc__ = (
        f"``{helper.__name__}`` for a plain (not async) test: the same arguments and result, "
        "on an event loop of its own (``RuntimeError`` when called from a running loop)."
    )
    return run


run_workflow_sync = _sync(run_workflow)
run_grader_sync = _sync(run_grader)
run_rollout_sync = _sync(run_rollout)


def _endpoint_of(endpoint: LLMEndpoint | None, model: ModelTransport | None) -> LLMEndpoint | None:
    if endpoint is None and isinstance(model, MockModel):
        return model.endpoint
    return endpoint


@dataclass(frozen=True)
class MockToolCall:
    """A tool call a :class:`MockReply` asks for: ``arguments`` as a dict (sent as JSON) or
    as the JSON text itself (malformed on purpose, if a test wants that); ``id`` defaults
    to ``call_<call number>_<index>``."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class MockReply:
    """One assistant answer: ``text``, ``tool_calls``, or both. Usage defaults to a token
    per word of the conversation sent (prompt) and of the answer (completion), a token per
    tool call; ``finish_reason`` to ``tool_calls`` or ``stop``."""

    text: str | None = None
    tool_calls: Sequence[MockToolCall] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


@dataclass(frozen=True)
class MockError:
    """An error answer: HTTP ``status`` (429 and 5xx are retried per call, as in a run),
    with ``Retry-After: retry_after`` seconds when given, and ``message`` as the
    endpoint's error text."""

    status: int = 500
    retry_after: float | None = None
    message: str = "scripted error"


Scripted = str | MockToolCall | MockReply | MockError
"""What one call is answered with: text, one tool call, a whole reply, or an error."""

Script = (
    Iterable[Scripted]
    | Mapping[str, Scripted | Iterable[Scripted]]
    | Callable[["MockCall"], Scripted | None]
)
"""What a :class:`MockModel` answers from: a sequence, a mapping from prompts, or a function
(returning ``None`` for a call it has no answer for)."""


@dataclass
class MockCall:
    """One call a :class:`MockModel` answered, as it was sent: ``body`` is the request's
    JSON (``messages``, ``tools``, ``model``... also as attributes), ``headers`` its
    headers with the ``Authorization`` value hidden, ``status`` what was answered."""

    url: str
    body: dict[str, Any]
    headers: dict[str, str]
    status: int = 200

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages")
        return messages if isinstance(messages, list) else []

    @property
    def tools(self) -> list[dict[str, Any]]:
        tools = self.body.get("tools")
        return tools if isinstance(tools, list) else []

    @property
    def model(self) -> str | None:
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def prompt(self) -> str:
        """The text of the conversation's first user message: the row's prompt."""
        for message in self.messages:
            if isinstance(message, dict) and message.get("role") == "user":
                return _text(message.get("content"))
        return ""


class MockModel:
    """A scripted OpenAI-compatible model that answers a run's model calls without a
    network (a :class:`~osmo_run.sdk.model_http.ModelTransport`): give it as ``model=`` to
    :func:`run_workflow`, :func:`run_grader` or :func:`run_rollout`, or as ``transport=``
    to a :class:`~osmo_run.sdk.model_clients.ModelClients`. Its :attr:`endpoint` is what
    ``ctx.llm`` (or ``ctx.judge``) returns.

    ``script`` says what each ``/chat/completions`` call is answered with:

    - a sequence: the calls in order, whoever makes them;
    - a mapping from a prompt (the text of the first user message) to its answer or its
      sequence of answers, for rows that run at once;
    - a function of the :class:`MockCall`, returning its answer (``None``: none).

    An answer is text, a :class:`MockToolCall`, a :class:`MockReply`, or a
    :class:`MockError` (429 with ``Retry-After``, 500...: the run's per-call retries answer
    it as they would a real endpoint's). A call the script has no answer for is answered
    HTTP 400 naming it, which fails the rollout with ``model_api_error``. A request with
    ``"stream": true`` (Strands sends them) is answered as server-sent events.

    :attr:`calls` records every call as it was sent, in order; :attr:`call_count` counts
    them. Use on one event loop.
    """

    def __init__(
        self,
        script: Script = (),
        *,
        model: str = "mock-model",
        base_url: str = "http://mock-model.invalid/v1",
    ) -> None:
        self.endpoint = LLMEndpoint(base_url, model)
        self.calls: list[MockCall] = []
        self._answer: Callable[[MockCall], Scripted | None]
        if callable(script):
            self._answer = script
        elif isinstance(script, Mapping):
            queues = {prompt: _queue(answers) for prompt, answers in script.items()}
            self._answer = lambda call: _next(queues.get(call.prompt))
        else:
            ordered = _queue(script)
            self._answer = lambda call: _next(ordered)

    @property
    def call_count(self) -> int:
        """How many calls were made (answered, errors included)."""
        return len(self.calls)

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timeout_sec: float
    ) -> HTTPAnswer:
        """Answer one model call (see the class docstring)."""
        try:
            sent = json.loads(body)
        except ValueError:
            sent = None
        call = MockCall(url, sent if isinstance(sent, dict) else {}, _shown_headers(headers))
        self.calls.append(call)
        number = len(self.calls)
        if not urlsplit(url).path.endswith("/chat/completions"):
            return _answer(call, 404, {"error": {"message": f"MockModel has no {url}"}})
        if not isinstance(sent, dict):
            return _answer(call, 400, {"error": {"message": "the request is not a JSON object"}})
        scripted = self._answer(call)
        if scripted is None:
            note = f" for prompt {call.prompt!r}" if call.prompt else ""
            missing = f"MockModel has no answer scripted for call {number}{note}"
            return _answer(call, 400, {"error": {"message": missing}})
        if isinstance(scripted, MockError):
            extra = (
                {} if scripted.retry_after is None else {"Retry-After": f"{scripted.retry_after:g}"}
            )
            payload = {"error": {"message": scripted.message}}
            return _answer(call, scripted.status, payload, extra)
        reply = _as_reply(scripted)
        message = _assistant_message(reply, number)
        usage = _usage(reply, call)
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        base = {"id": f"chatcmpl-mock-{number}", "created": 0, "model": call.model or ""}
        if not call.stream:
            choice = {"index": 0, "message": message, "finish_reason": finish}
            completion = {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            return _answer(call, 200, completion)
        chunks = [
            {**base, "object": "chat.completion.chunk", **chunk}
            for chunk in _chunks(message, finish, usage)
        ]
        events = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks)
        data = (events + "data: [DONE]\n\n").encode()
        return HTTPAnswer(200, data, _Headers({"Content-Type": "text/event-stream"}))


class _Headers:
    """Case-insensitive answer headers, with ``items()`` for the integrations' copy."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._items = dict(headers)
        self._lower = {name.lower(): value for name, value in headers.items()}

    def get(self, name: str, /) -> str | None:
        return self._lower.get(name.lower())

    def items(self) -> list[tuple[str, str]]:
        return list(self._items.items())


def _answer(
    call: MockCall, status: int, payload: dict[str, Any], headers: Mapping[str, str] = {}
) -> HTTPAnswer:
    call.status = status
    data = json.dumps(payload).encode()
    return HTTPAnswer(status, data, _Headers({"Content-Type": "application/json", **headers}))


def _queue(answers: Scripted | Iterable[Scripted]) -> Iterator[Scripted]:
    if isinstance(answers, str | MockToolCall | MockReply | MockError):
        return iter([answers])
    return iter(list(answers))


def _next(answers: Iterator[Scripted] | None) -> Scripted | None:
    return None if answers is None else next(answers, None)


def _shown_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {
        name: ("<hidden>" if name.lower() == "authorization" else value)
        for name, value in headers.items()
    }


def _as_reply(scripted: str | MockToolCall | MockReply) -> MockReply:
    if isinstance(scripted, str):
        return MockReply(text=scripted)
    if isinstance(scripted, MockToolCall):
        return MockReply(tool_calls=(scripted,))
    return scripted


def _assistant_message(reply: MockReply, number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{number}_{index}",
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.arguments
                    if isinstance(call.arguments, str)
                    else json.dumps(dict(call.arguments)),
                },
            }
            for index, call in enumerate(reply.tool_calls)
        ]
    return message


def _usage(reply: MockReply, call: MockCall) -> dict[str, int]:
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = sum(
            len(_text(m.get("content")).split()) for m in call.messages if isinstance(m, dict)
        )
    completion = reply.completion_tokens
    if completion is None:
        completion = len((reply.text or "").split()) + len(reply.tool_calls)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _text(content: object) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _chunks(
    message: dict[str, Any], finish: str, usage: dict[str, int]
) -> Iterator[dict[str, Any]]:
    """The reply as a stream: the message in one delta, the finish reason, the usage."""
    delta: dict[str, Any] = {"role": "assistant"}
    if message.get("tool_calls"):
        delta["tool_calls"] = [
            dict(call, index=index) for index, call in enumerate(message["tool_calls"])
        ]
    if message.get("content") is not None:
        delta["content"] = message["content"]
    yield {"choices": [{"index": 0, "delta": delta}]}
    yield {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    yield {"choices": [], "usage": usage}
