"""The benchmarks' model endpoint: OpenAI-compatible chat completions with a fixed latency,
counting the calls in flight.

    python stub_llm.py [--latency SEC] [--tool-turns K] [--host 127.0.0.1]

Prints ``{"port": N}`` once listening, then serves until SIGTERM. Every
``POST .../chat/completions`` is answered after ``--latency`` seconds (a timer, no work):
a request that offers ``tools`` gets an ``add`` tool call until its conversation holds
``--tool-turns`` tool results, then a text answer; any other request gets a text answer.
Streams (SSE) when the request asks. ``GET /stats`` answers ``{"calls", "in_flight",
"peak_in_flight", "connections"}``; ``POST /reset`` zeroes them.

It must not be the bottleneck at 10,000 calls/s on a 2-core machine, so it is a bare
``asyncio.Protocol`` (HTTP/1.1 with kept-alive connections, no framework) in a process of
its own, and it reads request bodies by byte search, never as JSON. Stdlib only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

TOOL_RESULT_MARKERS = (b'"role": "tool"', b'"role":"tool"')
STREAM_MARKERS = (b'"stream": true', b'"stream":true')


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.connections = 0

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "calls": self.calls,
                "in_flight": self.in_flight,
                "peak_in_flight": self.peak_in_flight,
                "connections": self.connections,
            }
        ).encode()


def _response(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 "
        + status.encode()
        + b"\r\nContent-Type: "
        + content_type
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def _completion(
    message: dict[str, object], finish: str, usage: dict[str, int], token_ids: int = 0
) -> bytes:
    choice: dict[str, object] = {"index": 0, "message": message, "finish_reason": finish}
    payload: dict[str, object] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench-model",
        "choices": [choice],
        "usage": usage,
    }
    if token_ids:  # as vLLM answers return_token_ids and logprobs
        completion = usage["completion_tokens"]
        payload["prompt_token_ids"] = [128_000 + i for i in range(token_ids)]
        choice["token_ids"] = [9_000 + i for i in range(completion)]
        content = [
            {"token": f"t{i}", "logprob": -0.1234567 * (i + 1), "bytes": None, "top_logprobs": []}
            for i in range(completion)
        ]
        choice["logprobs"] = {"content": content}
    return _response("200 OK", json.dumps(payload).encode())


def _stream(message: dict[str, object], finish: str, usage: dict[str, int]) -> bytes:
    base = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench-model",
    }
    delta: dict[str, object] = {"role": "assistant"}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [dict(call, index=0) for call in calls]
    else:
        delta["content"] = message["content"]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**base, "choices": [], "usage": usage},
    ]
    data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return _response("200 OK", data.encode(), b"text/event-stream")


class Answers:
    """Prebuilt answers: a text answer and tool call number n, plain and streamed."""

    def __init__(self, token_ids: int = 0) -> None:
        text = {"role": "assistant", "content": "4"}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        self.text = _completion(text, "stop", usage, token_ids)
        self.text_stream = _stream(text, "stop", usage)
        self._calls: dict[tuple[int, bool], bytes] = {}

    def tool_call(self, n: int, stream: bool) -> bytes:
        answer = self._calls.get((n, stream))
        if answer is None:
            call = {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            usage = {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
            build = _stream if stream else _completion
            answer = self._calls[(n, stream)] = build(message, "tool_calls", usage)
        return answer


class StubProtocol(asyncio.Protocol):
    def __init__(self, stats: Stats, answers: Answers, latency: float, tool_turns: int) -> None:
        self.stats, self.answers = stats, answers
        self.latency, self.tool_turns = latency, tool_turns
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.stats.connections += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.handle(head.split(b"\r\n", 1)[0], body)

    def handle(self, request_line: bytes, body: bytes) -> None:
        method, _, rest = request_line.partition(b" ")
        path = rest.partition(b" ")[0]
        if path.endswith(b"/stats"):
            self.send(_response("200 OK", self.stats.to_json()))
        elif path.endswith(b"/reset"):
            self.stats.reset()
            self.send(_response("200 OK", b"{}"))
        elif method == b"POST" and path.endswith(b"/chat/completions"):
            stats = self.stats
            stats.calls += 1
            stats.in_flight += 1
            stats.peak_in_flight = max(stats.peak_in_flight, stats.in_flight)
            stream = any(marker in body for marker in STREAM_MARKERS)
            if b'"tools"' in body:
                done = sum(body.count(marker) for marker in TOOL_RESULT_MARKERS)
                if done < self.tool_turns:
                    answer = self.answers.tool_call(done + 1, stream)
                else:
                    answer = self.answers.text_stream if stream else self.answers.text
            else:
                answer = self.answers.text_stream if stream else self.answers.text
            self.loop.call_later(self.latency, self.answer, answer)
        else:
            self.send(_response("404 Not Found", b'{"error": "not found"}'))

    def answer(self, data: bytes) -> None:
        self.stats.in_flight -= 1
        self.send(data)

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(host: str, latency: float, tool_turns: int, token_ids: int = 0) -> None:
    loop = asyncio.get_running_loop()
    stats, answers = Stats(), Answers(token_ids)
    server = await loop.create_server(
        lambda: StubProtocol(stats, answers, latency, tool_turns), host, 0, backlog=4096
    )
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write(json.dumps({"port": port}) + "\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--tool-turns", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--token-ids",
        type=int,
        default=0,
        help="text answers carry vLLM's prompt_token_ids (this many), token_ids and logprobs",
    )
    args = parser.parse_args()
    try:
        import resource

        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
    asyncio.run(serve(args.host, args.latency, args.tool_turns, args.token_ids))


if __name__ == "__main__":
    main()
