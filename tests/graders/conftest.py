"""Helpers for the built-in graders' tests: grade one answer through the SDK's real grader
phase (``osmo_run.testing.run_grader``, as every backend grades), and a scripted
OpenAI-compatible judge on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from osmo_run import ExecutionResult, Grader
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.testing import run_grader

__all__ = ["ScriptedJudge", "grade", "scripted_agent_model", "scripted_judge"]

QUESTION = "What is the answer?"


def grade(
    grader: type[Grader] | Grader,
    label: Any,
    answer: str | None,
    settings: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> ExecutionResult:
    """The final result of grading ``answer`` (the final assistant message; ``None`` for a
    sample without one) against ``label``, through the SDK's grader phase."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    if answer is not None:
        messages.append({"role": "assistant", "content": answer})
    graded = run_grader(
        grader, messages, label, metadata=metadata, settings=settings, timeout_sec=30
    )
    return asyncio.run(graded)


def explanation(result: ExecutionResult) -> str:
    """What the grader explained in the row (``info.grader.explanation``)."""
    return str(result.info["grader"]["explanation"])


class ScriptedJudge(ThreadingHTTPServer):
    """An OpenAI-compatible chat endpoint that answers from ``script``: each item is the
    reply text, or an ``int`` HTTP status to fail with (sent with a ``Retry-After`` too long
    to wait for); or ``respond(body)`` answers when set (for requests whose order is not
    fixed); ``usage`` is every answer's usage. Records every request's body and headers.
    Stands in for a paid judge model; the client, HTTP and parsing are real."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _JudgeHandler)
        self.script: list[str | int] = []
        self.respond: Callable[[dict[str, Any]], str | int] | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self.usage: dict[str, Any] = {
            "prompt_tokens": 50,
            "completion_tokens": 10,
            "total_tokens": 60,
        }
        """The ``usage`` of every answer (any JSON Python writes: ``NaN`` too)."""
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    @property
    def endpoint(self) -> LLMEndpoint:
        return LLMEndpoint(self.base_url, "judge-model")

    def settings(self, **extra: Any) -> dict[str, Any]:
        """``ModelJudge`` settings pointing at this endpoint."""
        return {"base_url": self.base_url, "model": "judge-model", **extra}

    def next_answer(self, body: dict[str, Any]) -> str | int:
        if self.respond is not None:
            return self.respond(body)
        with self._lock:
            return self.script.pop(0) if self.script else "no script left"


class _JudgeHandler(BaseHTTPRequestHandler):
    server: ScriptedJudge

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        self.server.headers_seen.append(dict(self.headers))
        answer = self.server.next_answer(body)
        if isinstance(answer, int):
            data = json.dumps({"error": {"message": f"scripted {answer}"}}).encode()
            status = answer
        else:
            status = 200
            data = json.dumps(
                {
                    "id": "chatcmpl-judge",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": answer},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": self.server.usage,
                }
            ).encode()
        self.send_response(status)
        if status != 200:
            # a failure that persists: the client's per-call retries give up at once on a
            # Retry-After this long, so the row sees the status (not the next scripted answer)
            self.send_header("Retry-After", "3600")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _serve() -> Iterator[ScriptedJudge]:
    server = ScriptedJudge()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def scripted_judge() -> Iterator[ScriptedJudge]:
    yield from _serve()


@pytest.fixture
def scripted_agent_model() -> Iterator[ScriptedJudge]:
    """A second scripted endpoint, for the workflow's model (``llm``) beside the judge."""
    yield from _serve()
