"""One OpenAI-compatible stub endpoint on 127.0.0.1 for every model test.

It stands in for a paid model API (which cannot be reached here): everything up to the
HTTP exchange is real. It answers ``POST /v1/chat/completions`` (and
``/v1/<any path>/chat/completions``: a server that gives each rollout a path of its own):

- a request with ``tools``: the answer calls ``add(17, 25)`` until the conversation holds
  ``tool_turns`` tool results (ids ``call_add_1``, ``call_add_2``...), then says
  ``The sum is 42.``; 20 prompt and 7 completion tokens per answer. This drives agent loops
  down the tool-call path a small model never takes.
- any other request: ``You said: <last message>``, or for ``echo auth`` the Authorization
  header it got; ``please 429`` / ``please 500`` in the last message answers that status.
  Usage: one prompt token per word of the last message, 3 completion tokens.
- streams (SSE) when asked, as Strands does.
- with ``token_ids`` set, answers as vLLM's OpenAI-compatible server does to a request
  with ``return_token_ids`` and ``logprobs``: ``prompt_token_ids``, ``choices[0].token_ids``
  and ``choices[0].logprobs.content[*].logprob``, numbers new on every call (and kept in
  ``token_answers``, in call order) so a test can tell one call's ids from another's; a
  stream carries them spread over its chunks.

``port`` (default: any free one) lets a test bring an endpoint up where a run found none.
``fail_next(n, status, retry_after)`` answers the next ``n`` calls with ``status``.
``delay_sec`` holds every answer that long; with ``gather`` set, a call is held until
``gather`` calls are in flight at once (at most ``gather_timeout_sec``), then ``delay_sec``:
a client that allows N calls at once shows N in ``peak_in_flight`` however busy the
machine is, and one that allows fewer shows fewer. It speaks HTTP/1.1 with kept-alive
connections, and counts what a client did: ``requests`` (path, auth, body, the client's
port, arrival time), ``in_flight`` and ``peak_in_flight`` (calls being answered at once),
``connections`` (distinct client connections seen) and ``open_connections`` (still open).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from osmo_run.sdk.context import LLMEndpoint


@dataclass
class StubRequest:
    path: str
    auth: str | None
    body: dict[str, Any]
    port: int
    at: float
    """``time.monotonic()`` when it arrived."""


class StubModel(ThreadingHTTPServer):
    """See the module docstring."""

    daemon_threads = True
    request_queue_size = 512

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away before its answer was written (a run that ended or
        abandoned a call, perhaps an earlier test's) is no error, as for a real server:
        its traceback on stderr would land in whichever test's output is being captured."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)

    def __init__(self, delay_sec: float = 0.0, tool_turns: int = 1, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.delay_sec = delay_sec
        self.tool_turns = tool_turns
        self.gather: int | None = None
        self.gather_timeout_sec = 20.0
        self._released = 0  # how many times `gather` calls were in flight at once
        self.requests: list[StubRequest] = []
        self.token_ids = False
        self.prompt_ids: int | None = None
        """With ``token_ids``: this many prompt ids in every answer (a long context in a
        few words), instead of one a word."""
        self.token_answers: list[dict[str, Any]] = []
        """``{"prompt_token_ids", "completion_token_ids", "logprobs"}`` of each answer
        that carried token ids, in the order they were sent."""
        self.in_flight = 0
        self.peak_in_flight = 0
        self.open_connections = 0
        self._failures: list[tuple[int, float | None]] = []
        self._at_once: list[bool] = []
        self._lock = threading.Condition()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    @property
    def endpoint(self) -> LLMEndpoint:
        return LLMEndpoint(self.base_url, "stub-model")

    @property
    def connections(self) -> int:
        return len({request.port for request in self.requests})

    def fail_next(
        self, n: int, status: int, retry_after: float | None = None, at_once: bool = False
    ) -> None:
        """Answer the next ``n`` calls with ``status`` (and ``Retry-After``, if given); with
        ``at_once``, without holding them ``delay_sec`` (a 429 comes back at once, the
        answer to the retry takes a model's time)."""
        with self._lock:
            self._failures.extend([(status, retry_after)] * n)
            self._at_once.extend([at_once] * n)

    def _arrive(self, request: StubRequest) -> tuple[tuple[int, float | None] | None, bool]:
        """Count ``request`` in; the failure scripted for it (if any) and whether its answer
        is held ``delay_sec``."""
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            failure = self._failures.pop(0) if self._failures else None
            held = not (failure is not None and self._at_once.pop(0))
            if self.gather is not None:  # hold every call until `gather` are in flight
                generation = self._released
                if self.in_flight >= self.gather:
                    self._released += 1
                    self._lock.notify_all()
                else:
                    self._lock.wait_for(
                        lambda: self._released > generation, self.gather_timeout_sec
                    )
            return failure, held

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _connected(self, change: int) -> None:
        with self._lock:
            self.open_connections += change

    def vllm_fields(
        self, body: dict[str, Any], prompt_tokens: int, completion_tokens: int
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The top-level and first-choice fields vLLM adds for ``return_token_ids`` and
        ``logprobs`` (none when not asked or ``token_ids`` is off); each call's ids are
        new (its number times 100,000 plus the position)."""
        if not self.token_ids:
            return {}, {}
        with self._lock:
            base = 100_000 * (len(self.token_answers) + 1)
            prompt = [base + i for i in range(self.prompt_ids or max(prompt_tokens, 1))]
            completion = [base + 50_000 + i for i in range(completion_tokens)]
            logprobs = [-0.015625 * (i + 1) for i in range(completion_tokens)]  # exact in binary
            answer = {"prompt_token_ids": prompt, "completion_token_ids": completion}
            self.token_answers.append({**answer, "logprobs": logprobs})
        top: dict[str, Any] = {}
        choice: dict[str, Any] = {}
        if body.get("return_token_ids"):
            top["prompt_token_ids"] = prompt
            choice["token_ids"] = completion
        if body.get("logprobs"):
            content = [
                {"token": f"t{i}", "logprob": lp, "bytes": None, "top_logprobs": []}
                for i, lp in enumerate(logprobs)
            ]
            choice["logprobs"] = {"content": content}
        return top, choice

    def answer(self, body: dict[str, Any], auth: str | None) -> tuple[dict[str, Any], int, int]:
        """``(message, prompt_tokens, completion_tokens)`` for a chat request."""
        messages = body.get("messages") or []
        if body.get("tools"):
            results = sum(1 for m in messages if m.get("role") == "tool")
            if results < self.tool_turns:
                call = {
                    "id": f"call_add_{results + 1}",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 17, "b": 25}'},
                }
                return {"role": "assistant", "content": None, "tool_calls": [call]}, 20, 7
            return {"role": "assistant", "content": "The sum is 42."}, 20, 7
        content = _text(messages[-1].get("content")) if messages else ""
        reply = f"auth was {auth}" if "echo auth" in content else f"You said: {content}"
        return {"role": "assistant", "content": reply}, len(content.split()), 3


def _text(content: object) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


class _Handler(BaseHTTPRequestHandler):
    server: StubModel
    protocol_version = "HTTP/1.1"  # kept-alive connections, as real endpoints keep them

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server._connected(+1)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server._connected(-1)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        auth = self.headers.get("Authorization")
        request = StubRequest(self.path, auth, body, self.client_address[1], time.monotonic())
        failure, held = self.server._arrive(request)
        try:
            if self.server.delay_sec and held:
                time.sleep(self.server.delay_sec)
            status, content_type, data, headers = self._respond(body, auth, failure)
        finally:
            self.server._leave()  # before the answer goes out: the client may call again at once
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _respond(
        self, body: dict[str, Any], auth: str | None, failure: tuple[int, float | None] | None
    ) -> tuple[int, str, bytes, dict[str, str]]:
        messages = body.get("messages") or [{}]
        last = _text(messages[-1].get("content"))
        if not self.path.startswith("/v1/") or not self.path.endswith("/chat/completions"):
            return _json(404, {"error": "not found"})
        if failure is not None:
            status, retry_after = failure
            headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
            return _json(status, {"error": {"message": f"scripted {status}"}}, headers)
        if "please 429" in last:
            return _json(429, {"error": {"message": "slow down"}})
        if "please 500" in last:
            return _json(500, {"error": {"message": "model crashed"}})
        message, prompt_tokens, completion_tokens = self.server.answer(body, auth)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        base = {"id": "chatcmpl-stub", "created": 0, "model": body.get("model", "")}
        if not body.get("stream"):
            top, extra = self.server.vllm_fields(body, prompt_tokens, completion_tokens)
            choice = {"index": 0, "message": message, "finish_reason": finish, **extra}
            return _json(
                200,
                {**base, "object": "chat.completion", "choices": [choice], "usage": usage, **top},
            )
        chunks = [
            {**base, "object": "chat.completion.chunk", **chunk}
            for chunk in _chunks(message, finish, usage)
        ]
        top, extra = self.server.vllm_fields(body, prompt_tokens, completion_tokens)
        _spread_over(chunks, top, extra)
        data = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
        return 200, "text/event-stream", data.encode(), {}


def _json(
    status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, str, bytes, dict[str, str]]:
    return status, "application/json", json.dumps(payload).encode(), headers or {}


def _chunks(
    message: dict[str, Any], finish: str, usage: dict[str, int]
) -> Iterator[dict[str, Any]]:
    delta: dict[str, Any] = {"role": "assistant"}
    if message.get("tool_calls"):
        delta["tool_calls"] = [dict(call, index=0) for call in message["tool_calls"]]
    else:
        delta["content"] = message["content"]
    yield {"choices": [{"index": 0, "delta": delta}]}
    yield {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    yield {"choices": [], "usage": usage}


def _spread_over(chunks: list[dict[str, Any]], top: dict[str, Any], extra: dict[str, Any]) -> None:
    """Put vLLM's fields in a stream as it does: ``prompt_token_ids`` with the first chunk,
    the completion's ids and logprobs split over the chunks that carry a choice (the
    first gets all but the last, the second the last)."""
    chunks[0].update(top)
    with_choice = [chunk["choices"][0] for chunk in chunks if chunk["choices"]]
    ids = extra.get("token_ids")
    content = (extra.get("logprobs") or {}).get("content")
    for index, choice in enumerate(with_choice[:2]):
        part = slice(None, -1) if index == 0 else slice(-1, None)
        if ids is not None:
            choice["token_ids"] = ids[part]
        if content is not None:
            choice["logprobs"] = {"content": content[part]}


def serve(server: StubModel) -> Iterator[StubModel]:
    """Serve ``server`` in a thread for the duration of a fixture."""
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
