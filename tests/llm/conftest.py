"""Fixtures for the embedded model and the agent-framework integrations.

``embedded_llm`` is the REAL embedded server (llama.cpp + SmolLM2-135M-Instruct), started
once per test session. Without the ``embedded`` extra and the model wheel the tests that
need it are skipped, naming the install script; in CI (``CI`` set) they fail instead.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from osmo_run.errors import BackendUnavailable
from osmo_run.llm.embedded import EmbeddedLLMServer, check_available
from osmo_run.sdk.context import LLMEndpoint


def require_embedded() -> None:
    """Skip (fail in CI) unless the embedded server and its model are installed."""
    try:
        check_available()
    except BackendUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the embedded model: {exc}", pytrace=False)
        pytest.skip(f"{exc}")


def require_extra(module: str, extra: str) -> None:
    """Skip (fail in CI) unless ``module``, installed by the extra ``extra``, imports."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        message = f"needs pip install 'osmo-run[{extra}]' ({exc})"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message, allow_module_level=True)


@pytest.fixture(scope="session")
def embedded_llm() -> Iterator[LLMEndpoint]:
    """The real embedded model server's endpoint, for the whole session."""
    require_embedded()
    server = EmbeddedLLMServer(parallel=2)
    endpoint = server.start()
    yield endpoint
    server.stop()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, dead but not reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class ScriptedModel(ThreadingHTTPServer):
    """An OpenAI-compatible stand-in that answers from a script, to drive the agent loops
    down paths the small model never takes: its first answer calls the ``add`` tool, the
    next ones are text. Streams (SSE) when asked. Records every request body."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.requests: list[dict[str, Any]] = []

    @property
    def endpoint(self) -> LLMEndpoint:
        return LLMEndpoint(f"http://127.0.0.1:{self.server_address[1]}/v1", "scripted")

    def answer(self) -> dict[str, Any]:
        if len(self.requests) == 1:
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_add_1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 17, "b": 25}'},
                    }
                ],
            }
        return {"role": "assistant", "content": "The sum is 42."}


class _ScriptedHandler(BaseHTTPRequestHandler):
    server: ScriptedModel

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        message = self.server.answer()
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
        if not body.get("stream"):
            payload = {
                "id": "chatcmpl-scripted",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
            self._send(200, "application/json", json.dumps(payload).encode())
            return
        delta: dict[str, Any] = {"role": "assistant"}
        if message.get("tool_calls"):
            delta["tool_calls"] = [dict(call, index=0) for call in message["tool_calls"]]
        else:
            delta["content"] = message["content"]
        base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0}
        chunks = [
            {**base, "model": body["model"], "choices": [{"index": 0, "delta": delta}]},
            {
                **base,
                "model": body["model"],
                "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
            },
            {**base, "model": body["model"], "choices": [], "usage": usage},
        ]
        data = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
        self._send(200, "text/event-stream", data.encode())

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def scripted_model() -> Iterator[ScriptedModel]:
    server = ScriptedModel()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)
