"""Model calls made through the standard library (inside sandboxes: Harbor trials,
``--isolation process``) reuse kept-alive connections, and survive a server that closed one
while it sat idle."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from osmo_run.sdk.llm import chat_completion
from osmo_run.sdk.model_http import TransportError, post_blocking
from tests.llm.stub_model import StubModel


def test_calls_outside_a_run_reuse_one_connection(stub_model: StubModel) -> None:
    async def one_after_another() -> list[str]:
        replies = []
        for i in range(5):
            messages = [{"role": "user", "content": f"call {i}"}]
            answer = await chat_completion(messages, endpoint=stub_model.endpoint)
            replies.append(answer["choices"][0]["message"]["content"])
        return replies

    assert asyncio.run(one_after_another()) == [f"You said: call {i}" for i in range(5)]
    assert stub_model.connections == 1  # urllib opened five


@pytest.fixture
def closes_after_each_answer() -> Iterator[tuple[str, list[int]]]:
    """A server that answers one request per connection and then closes it, without saying
    so (no ``Connection: close``): what a kept-alive client meets when an endpoint drops
    idle connections. Yields its URL and the client ports it saw."""
    listener = socket.create_server(("127.0.0.1", 0))
    ports: list[int] = []

    def serve() -> None:
        while True:
            try:
                connection, (_, port) = listener.accept()
            except OSError:
                return
            with connection:
                ports.append(port)
                request = b""
                while b"\r\n\r\n" not in request:
                    request += connection.recv(65536)
                head, _, body = request.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(body) < length:
                    body += connection.recv(65536)
                data = json.dumps({"echo": json.loads(body)}).encode()
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
                )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1/chat/completions", ports
    listener.close()


def test_a_connection_the_server_closed_while_idle_is_replaced(
    closes_after_each_answer: tuple[str, list[int]],
) -> None:
    url, ports = closes_after_each_answer
    headers = {"Content-Type": "application/json"}
    answers = [post_blocking(url, b'{"n": %d}' % i, headers, 5.0) for i in range(3)]
    assert [json.loads(a.body) for a in answers] == [{"echo": {"n": i}} for i in range(3)]
    assert len(ports) == 3  # each call after the first found its connection closed


def test_a_refused_connection_is_a_retryable_transport_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    with pytest.raises(TransportError, match=f"cannot reach http://127.0.0.1:{port}") as caught:
        post_blocking(f"http://127.0.0.1:{port}/v1/chat/completions", b"{}", {}, 2.0)
    assert caught.value.retryable


def test_an_idle_connection_past_its_time_is_closed_not_reused(
    stub_model: StubModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmo_run.sdk import http_pool

    monkeypatch.setattr(http_pool, "IDLE_TIMEOUT_SEC", 0.0)
    url = f"{stub_model.base_url}/chat/completions"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    for _ in range(2):
        post_blocking(url, body, {"Content-Type": "application/json"}, 5.0)
    assert stub_model.connections == 2
    assert stub_model.open_connections <= 1  # the stale one was closed, not left behind
