"""examples/llm_chat.py against a local OpenAI-compatible stub, through the real CLI."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI, REPO, cli_env, read_jsonl

WriteJsonl = Callable[..., Path]
API_KEY = "sk-stub-9d8c7b6a5f4e"
ENV = {"OSMO_TEST_LLM_KEY": API_KEY, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


class ChatStub(ThreadingHTTPServer):
    """Answers ``POST /v1/chat/completions`` with ``You said: <last user message>``.

    A user message containing ``please 429`` or ``please 500`` gets that HTTP status; one
    containing ``echo auth`` gets the Authorization header back as the reply.
    """

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: ChatStub

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        auth = self.headers.get("Authorization")
        self.server.requests.append({"path": self.path, "auth": auth, "body": body})
        content = body["messages"][-1]["content"]
        if self.path != "/v1/chat/completions":
            self._send(404, {"error": "not found"})
        elif "please 429" in content:
            self._send(429, {"error": {"message": "slow down"}})
        elif "please 500" in content:
            self._send(500, {"error": {"message": "model crashed"}})
        else:
            reply = f"auth was {auth}" if "echo auth" in content else f"You said: {content}"
            self._send(
                200,
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": len(content.split()),
                        "completion_tokens": 3,
                        "total_tokens": len(content.split()) + 3,
                    },
                },
            )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def stub() -> Iterator[ChatStub]:
    server = ChatStub()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _spec(tmp_path: Path, base_url: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"""
workflow: examples.llm_chat:ChatWorkflow
grader: examples.llm_chat:ContainsLabelGrader
code_dir: {REPO}
workflow_config: {{settings: {{temperature: 0.2, max_tokens: 16}}}}
llm: {{base_url: "{base_url}", model: stub-model, api_key_env: OSMO_TEST_LLM_KEY}}
timeouts: {{agent_sec: 10, grader_sec: 5}}
retries: {{max_attempts: 1}}  # each failure mode is asserted on its first and only try
output: out.jsonl
"""
    )
    return spec


def test_chat_workflow_is_graded_and_counts_tokens(
    cli: CLI, stub: ChatStub, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    data = write_jsonl(
        [
            {"id": "match", "prompt": "say apple please", "label": "APPLE"},
            {"id": "miss", "user_prompt": "say pear", "ground_truth": "banana"},
            {"id": "auth", "prompt": "echo auth", "label": "Bearer"},
            {"id": "limited", "prompt": "please 429", "label": "x"},
            {"id": "crashed", "prompt": "please 500", "label": "x"},
        ]
    )
    spec = _spec(tmp_path, stub.base_url)
    proc = cli("local", data, "--spec", spec, env=cli_env(**ENV))
    assert proc.returncode == 1, proc.stderr
    rows = {row["row_id"]: row for row in read_jsonl(tmp_path / "out.jsonl")}
    assert (rows["match"]["reward"], rows["miss"]["reward"], rows["auth"]["reward"]) == (
        1.0,
        0.0,
        1.0,
    )
    usage = rows["match"]["usage"]  # counted by chat_completion, from the endpoint's answer
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["model_calls"]) == (3, 3, 1)
    assert usage["total_tokens"] == 6 and usage["model_sec"] >= 0
    assert rows["limited"]["usage"] is None  # a failed call reports no usage
    summary = json.loads((tmp_path / "out.summary.json").read_text())["usage"]
    assert (summary["rollouts"], summary["model_calls"], summary["completion_tokens"]) == (
        3,
        3,
        9,
    )
    assert rows["match"]["info"] == {"finish_reason": "stop"}
    assert rows["match"]["sample"]["messages"][-1] == {
        "role": "assistant",
        "content": "You said: say apple please",
    }
    assert rows["auth"]["sample"]["messages"][-1]["content"] == "auth was Bearer ***"
    assert (rows["limited"]["error_category"], rows["limited"]["error_phase"]) == (
        "rate_limit",
        "workflow",
    )
    assert "answered HTTP 429" in rows["limited"]["error_message"]
    assert rows["crashed"]["error_category"] == "model_api_error"
    assert "answered HTTP 500" in rows["crashed"]["error_message"]

    assert len(stub.requests) == 5
    assert {request["auth"] for request in stub.requests} == {f"Bearer {API_KEY}"}
    assert {request["path"] for request in stub.requests} == {"/v1/chat/completions"}
    body = stub.requests[0]["body"]
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("stub-model", 0.2, 16)
    for path in (tmp_path / "out.jsonl", tmp_path / "out.summary.json"):
        assert API_KEY not in path.read_text()
    assert API_KEY not in proc.stdout + proc.stderr


def test_refused_connection_is_a_model_api_error(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    spec = _spec(tmp_path, f"http://127.0.0.1:{port}/v1")
    data = write_jsonl([{"prompt": "hello", "label": "x"}])
    proc = cli("local", data, "--spec", spec, env=cli_env(**ENV))
    assert proc.returncode == 1, proc.stderr
    (row,) = read_jsonl(tmp_path / "out.jsonl")
    assert (row["error_category"], row["error_phase"]) == ("model_api_error", "workflow")
    assert row["error_message"].startswith("ModelAPIError: cannot reach ")
    assert API_KEY not in (tmp_path / "out.jsonl").read_text()
