"""A rate-limited OpenAI-compatible stub endpoint: at most ``slots`` calls in flight, 429 above.

It stands in for a provider that enforces a concurrency limit (a paid model API cannot be
reached here). ``POST /v1/chat/completions`` is answered after ``delay_sec`` with ``reply``
(``Hi.``) and ``usage`` of ``prompt_tokens`` + ``completion_tokens`` (10 + 5 by default: 15
a call), while fewer than ``slots`` calls are being answered; a call beyond that is answered
at once with HTTP 429 (and ``Retry-After`` when ``retry_after`` is set), as providers do. It
counts ``calls`` (every request), ``answered``, ``throttled`` (429s) and ``peak`` (calls
being answered at once), and records each request's ``model``.

An aiohttp server on its own event loop in a thread of the test (or bench) process, so it
keeps up with hundreds of calls in flight; :func:`serve_slots` starts and stops it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web


class SlotStub:
    """See the module docstring."""

    def __init__(
        self,
        slots: int = 40,
        delay_sec: float = 0.05,
        prompt_tokens: int = 10,
        completion_tokens: int = 5,
        retry_after: float | None = None,
        reply: str = "Hi.",
        usage: bool = True,
    ) -> None:
        self.slots = slots
        self.reply = reply
        self.usage = usage
        """Whether answers carry ``usage`` (some servers never do)."""
        self.delay_sec = delay_sec
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.retry_after = retry_after
        self.calls = 0
        self.answered = 0
        self.throttled = 0
        self.in_flight = 0
        self.peak = 0
        self.models: list[str] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _chat(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        self.calls += 1
        self.models.append(str(body.get("model")))
        if self.in_flight >= self.slots:
            self.throttled += 1
            headers = {} if self.retry_after is None else {"Retry-After": f"{self.retry_after:g}"}
            return web.json_response(
                {"error": {"message": "Rate limit reached", "type": "rate_limit"}},
                status=429,
                headers=headers,
            )
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay_sec)
        finally:
            self.in_flight -= 1
        self.answered += 1
        usage = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        return web.json_response(
            {
                "id": f"chatcmpl-{self.calls}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": self.reply},
                        "finish_reason": "stop",
                    }
                ],
                **({"usage": usage} if self.usage else {}),
            }
        )

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        server = site._server  # the port the OS chose
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1])

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@contextmanager
def serve_slots(stub: SlotStub) -> Iterator[SlotStub]:
    """Run ``stub`` in a thread of its own until the block ends."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(stub._start())
        ready.set()
        loop.run_forever()
        loop.run_until_complete(stub._stop())
        loop.close()

    thread = threading.Thread(target=main, name="slot-stub", daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the slot stub did not start within 30 s")
    try:
        yield stub
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
