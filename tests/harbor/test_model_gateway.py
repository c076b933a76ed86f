"""The model gateway of Harbor trials, served on 127.0.0.1 without Docker: what a trial's
client sees through it and what the run's model layer records of its calls.

The gateway stands where trials reach a loopback endpoint (Docker's bridge address in a
run); here its clients are this process's, the endpoint the 40-slot stub
(``tests/llm/slot_stub.py``) or a small streaming one.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import random
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.conftest import require_extra

require_extra("harbor", "harbor")

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from osmo_run.backends.harbor.relay import ModelGateway  # noqa: E402
from osmo_run.sdk.model_budget import RunBudget, refused_by_budget  # noqa: E402
from osmo_run.sdk.model_layer import ModelLayer  # noqa: E402
from osmo_run.sdk.model_limits import ModelLimits  # noqa: E402
from tests.llm.slot_stub import SlotStub, serve_slots  # noqa: E402

SLOTS = 40
CLIENTS = 200
CALLS_EACH = 3
KEY = "sk-gateway-secret-0123456789"
ASKED = {"model": "stub-model", "messages": [{"role": "user", "content": "hello"}]}


@contextlib.asynccontextmanager
async def gateway_to(base_url: str, layer: ModelLayer | None, **options: Any) -> AsyncIterator[str]:
    """A gateway to ``base_url``'s endpoint on 127.0.0.1; yields the base URL clients use."""
    gateway = ModelGateway(base_url, layer, **options)
    port = await gateway.start("127.0.0.1")
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await gateway.close()


async def call_until_answered(
    session: aiohttp.ClientSession, url: str, tries: int = 60
) -> tuple[int, int]:
    """POST one chat completion as a trial's SDK does: retry a 429 after a short jittered
    backoff. Returns ``(final status, tries made)``."""
    for attempt in range(1, tries + 1):
        async with session.post(
            url, json=ASKED, headers={"Authorization": f"Bearer {KEY}"}
        ) as response:
            await response.read()
            if response.status != 429:
                return response.status, attempt
        await asyncio.sleep(min(0.05 * 2**attempt, 0.5) * random.uniform(0.5, 1.0))
    return 429, tries


async def storm(base_url: str, layer: ModelLayer) -> list[tuple[int, int]]:
    """:data:`CLIENTS` clients at once, each making :data:`CALLS_EACH` calls in turn."""
    url = base_url + "/chat/completions"
    connector = aiohttp.TCPConnector(limit=0)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        gateway_to(url, layer) as through,
    ):

        async def client() -> list[tuple[int, int]]:
            return [
                await call_until_answered(session, through + "/chat/completions")
                for _ in range(CALLS_EACH)
            ]

        results = await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return [outcome for each in results for outcome in each]


def test_adaptive_limit_holds_trials_calls_under_the_endpoints_slots_with_bounded_429s() -> None:
    layer = ModelLayer(ModelLimits(CLIENTS))
    with serve_slots(SlotStub(slots=SLOTS, delay_sec=0.05)) as stub:
        outcomes = asyncio.run(asyncio.wait_for(storm(stub.base_url, layer), 300))
    calls = CLIENTS * CALLS_EACH
    assert [status for status, _ in outcomes] == [200] * calls  # every call answered
    assert stub.answered == calls
    # The in-process bound: at most twice the endpoint's slots while the limit finds
    # them, then one 429 per 20 calls at most.
    assert stub.throttled <= 2 * SLOTS + calls // 20, stub.throttled
    (limit,) = layer.limits.all()
    stats = limit.stats()
    assert stats.throttled == stub.throttled  # the run's 429 count is the endpoint's
    assert stats.calls == stub.calls and stats.mode == "adaptive"
    assert stats.final <= 2 * SLOTS
    status = layer.status()
    assert status is not None and f"429s {stub.throttled}" in status


def test_a_fixed_limit_of_200_lets_the_storm_through() -> None:
    limits = ModelLimits(CLIENTS)
    with serve_slots(SlotStub(slots=SLOTS, delay_sec=0.05)) as stub:
        limits.fix(stub.base_url, CLIENTS)
        layer = ModelLayer(limits)
        outcomes = asyncio.run(asyncio.wait_for(storm(stub.base_url, layer), 300))
    calls = CLIENTS * CALLS_EACH
    assert [status for status, _ in outcomes] == [200] * calls
    assert stub.throttled > 2 * SLOTS + calls // 20, "more than adaptive's bound"
    assert layer.limits.all()[0].stats().throttled == stub.throttled


def test_a_spent_budget_refuses_the_trials_calls_with_what_the_sdk_raises() -> None:
    """15 tokens a call, 100 allowed: calls one at a time are sent until 100 is reached
    (7 calls, 105 tokens), then refused with the budget's answer, never sent."""
    budget = RunBudget(tokens=100, default_model="stub-model")
    layer = ModelLayer(ModelLimits(8), budget)

    async def main(base_url: str) -> list[tuple[int, str | None]]:
        seen = []
        async with aiohttp.ClientSession() as session, gateway_to(base_url, layer) as through:
            for _ in range(10):
                async with session.post(through + "/chat/completions", json=ASKED) as answer:
                    body = await answer.read()
                    seen.append(
                        (answer.status, refused_by_budget(answer.status, answer.headers, body))
                    )
        return seen

    with serve_slots(SlotStub(slots=SLOTS, delay_sec=0.0)) as stub:
        seen = asyncio.run(asyncio.wait_for(main(stub.base_url), 60))
    assert [status for status, _ in seen] == [200] * 7 + [402] * 3
    refusal = seen[-1][1]
    assert refusal is not None and "tokens 105 of 100 reached" in refusal
    assert stub.calls == 7  # the refused ones never left
    assert budget.spent_tokens == 105 and budget.refused_calls == 3
    assert budget.admitted_calls == 7


def test_an_answer_without_usage_stops_a_token_budget() -> None:
    budget = RunBudget(tokens=10_000)
    layer = ModelLayer(ModelLimits(8), budget)

    async def main(base_url: str) -> list[int]:
        statuses = []
        async with aiohttp.ClientSession() as session, gateway_to(base_url, layer) as through:
            for _ in range(3):
                async with session.post(through + "/chat/completions", json=ASKED) as answer:
                    await answer.read()
                    statuses.append(answer.status)
        return statuses

    with serve_slots(SlotStub(slots=SLOTS, delay_sec=0.0, usage=False)) as stub:
        statuses = asyncio.run(asyncio.wait_for(main(stub.base_url), 60))
    assert statuses == [200, 402, 402] and stub.calls == 1
    assert "came without a usable usage.prompt_tokens" in (budget.reached() or "")


def test_a_model_name_of_half_a_megabyte_or_lone_surrogates_stays_out_of_the_budgets_line() -> None:
    """The trial names the model its call asks for; the budget's line that names it (an
    answer without usage) stays short and writable as UTF-8."""
    budget = RunBudget(tokens=10_000)
    layer = ModelLayer(ModelLimits(8), budget)
    asked = json.dumps({**ASKED, "model": "\udc80" + "m" * 500_000})

    async def main(base_url: str) -> int:
        async with (
            aiohttp.ClientSession() as session,
            gateway_to(base_url, layer) as through,
            session.post(
                through + "/chat/completions",
                data=io.BytesIO(asked.encode()),
                headers={"Content-Type": "application/json"},
            ) as answer,
        ):
            await answer.read()
            return answer.status

    with serve_slots(SlotStub(slots=SLOTS, delay_sec=0.0, usage=False)) as stub:
        assert asyncio.run(asyncio.wait_for(main(stub.base_url), 60)) == 200
    line = budget.reached() or ""
    assert "cannot be kept" in line and len(line) < 400
    json.dumps(budget.to_dict(), ensure_ascii=False).encode("utf-8")
    line.encode("utf-8")


def test_a_client_that_goes_away_mid_call_frees_its_slot() -> None:
    """A fixed limit of one: the first client leaves while its call is answered slowly; the
    second is answered as soon as the stub answers it, not after the first call's 5 s."""
    limits = ModelLimits(4)

    async def main(stub: SlotStub) -> float:
        limits.fix(stub.base_url, 1)
        layer = ModelLayer(limits)
        async with aiohttp.ClientSession() as session, gateway_to(stub.base_url, layer) as through:
            url = through + "/chat/completions"
            leaving = asyncio.ensure_future(session.post(url, json=ASKED))
            # the stub answers on a thread of its own: no event of this loop to wait on
            while stub.in_flight == 0:  # noqa: ASYNC110 -- until the call reached the endpoint
                await asyncio.sleep(0.01)
            leaving.cancel()  # the client closes its connection
            with contextlib.suppress(asyncio.CancelledError):
                await leaving
            loop = asyncio.get_running_loop()
            started = loop.time()
            stub.delay_sec = 0.0
            async with session.post(url, json=ASKED) as answer:
                assert answer.status == 200
            return loop.time() - started

    with serve_slots(SlotStub(slots=SLOTS, delay_sec=5.0)) as stub:
        waited = asyncio.run(asyncio.wait_for(main(stub), 60))
    assert waited < 4.0, f"the second call waited {waited:.1f}s: the first kept its slot"
    (limit,) = limits.all()
    assert limit.in_flight == 0


def test_the_trials_key_reaches_the_endpoint_and_no_log_line(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    seen: list[str | None] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response(
            {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
        )

    async def main() -> None:
        async with (
            serving(chat) as base_url,
            gateway_to(base_url, ModelLayer(ModelLimits(4))) as through,
            aiohttp.ClientSession() as session,
        ):
            for path in ("/chat/completions", "/missing"):
                async with session.post(
                    through + path, json=ASKED, headers={"Authorization": f"Bearer {KEY}"}
                ) as answer:
                    await answer.read()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(asyncio.wait_for(main(), 60))
    assert seen == [f"Bearer {KEY}"]
    out, err = capfd.readouterr()
    logged = [record.getMessage() for record in caplog.records]
    assert not [line for line in [*logged, out, err] if KEY in line]


def test_an_endpoint_that_cannot_be_reached_is_a_502_naming_it() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"  # closed again: nobody there
    layer = ModelLayer(ModelLimits(4))

    async def main() -> tuple[int, str]:
        async with (
            gateway_to(dead, layer) as through,
            aiohttp.ClientSession() as session,
            session.post(through + "/chat/completions", json=ASKED) as answer,
        ):
            return answer.status, (await answer.json())["error"]["message"]

    status, message = asyncio.run(asyncio.wait_for(main(), 60))
    assert status == 502
    assert message.startswith(f"the run's model gateway could not reach {dead[:-3]}: ")
    (limit,) = layer.limits.all()
    assert limit.in_flight == 0 and limit.throttled == 0


def test_a_request_of_several_megabytes_is_forwarded_whole() -> None:
    """A long conversation's request (3 MB here) reaches the endpoint as it was sent."""
    sizes: list[int] = []

    async def chat(request: web.Request) -> web.Response:
        sizes.append(len(await request.read()))
        return web.json_response({"usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    big = {**ASKED, "messages": [{"role": "user", "content": "x" * 3_000_000}]}
    payload = json.dumps(big).encode()

    async def main() -> int:
        async with (
            serving(chat, client_max_size=2**24) as base_url,
            gateway_to(base_url, ModelLayer(ModelLimits(4))) as through,
            aiohttp.ClientSession() as session,
            session.post(through + "/chat/completions", data=io.BytesIO(payload)) as answer,
        ):
            return answer.status

    assert asyncio.run(asyncio.wait_for(main(), 60)) == 200
    assert sizes == [len(payload)]


def test_a_body_over_the_limit_is_refused_413_and_never_reaches_the_endpoint() -> None:
    """A runaway trial's request is not read into the host's memory whole: past the
    gateway's limit (declared or streamed without a length) it is answered 413."""
    sizes: list[int] = []

    async def chat(request: web.Request) -> web.Response:
        sizes.append(len(await request.read()))
        return web.json_response({"usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b"x" * 65536  # 4 MiB without a Content-Length

    async def main() -> list[tuple[int, str]]:
        answers = []
        async with (
            serving(chat, client_max_size=2**24) as base_url,
            gateway_to(base_url, None, max_body_bytes=1_000_000) as through,
            aiohttp.ClientSession() as session,
        ):
            for data in (io.BytesIO(b"x" * 2_000_000), chunks(), json.dumps(ASKED).encode()):
                async with session.post(through + "/chat/completions", data=data) as answer:
                    answers.append((answer.status, await answer.text()))
        return answers

    too_big, streamed, fine = asyncio.run(asyncio.wait_for(main(), 60))
    assert too_big[0] == streamed[0] == 413
    assert "at most 1,000,000 bytes" in too_big[1]
    assert fine[0] == 200 and sizes == [len(json.dumps(ASKED))]


def test_a_streamed_answer_comes_through_as_it_is_and_its_usage_is_counted() -> None:
    events = [
        {"choices": [{"delta": {"content": "Hi"}, "finish_reason": None}]},
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 4}},
    ]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    body += b"data: [DONE]\n\n"

    async def chat(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for line in body.split(b"\n\n")[:-1]:
            await response.write(line + b"\n\n")
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    budget = RunBudget(tokens=1000)
    layer = ModelLayer(ModelLimits(4), budget)

    async def main() -> tuple[int, str, bytes]:
        async with (
            serving(chat) as base_url,
            gateway_to(base_url, layer) as through,
            aiohttp.ClientSession() as session,
            session.post(through + "/chat/completions", json=ASKED) as answer,
        ):
            return answer.status, answer.headers["Content-Type"], await answer.read()

    status, content_type, received = asyncio.run(asyncio.wait_for(main(), 60))
    assert (status, content_type, received) == (200, "text/event-stream", body)
    assert budget.spent_tokens == 15 and budget.reached() is None


@pytest.mark.parametrize("with_usage", [True, False], ids=["usage", "no-usage"])
def test_a_trial_that_leaves_a_stream_before_its_usage_is_still_counted(with_usage: bool) -> None:
    """A hostile (or cancelled) trial reads a streamed answer's content and closes its
    connection before the last event, the one carrying ``usage``: the gateway reads the
    stream to its end and counts it (without a usage, a token budget stops), so leaving
    early spends nothing uncounted."""
    content = [
        {"choices": [{"delta": {"content": f"w{i} "}, "finish_reason": None}]} for i in range(5)
    ]
    last = [{"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 40}}]
    events = content + (last if with_usage else [])
    streamed = asyncio.Event()

    async def chat(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events[:2]:
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        streamed.set()
        await asyncio.sleep(0.5)  # the trial leaves meanwhile
        for event in events[2:]:
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    budget = RunBudget(tokens=1000)
    layer = ModelLayer(ModelLimits(4), budget)

    async def main() -> tuple[bytes, int]:
        async with serving(chat) as base_url, gateway_to(base_url, layer) as through:
            async with aiohttp.ClientSession() as session:
                answer = await session.post(through + "/chat/completions", json=ASKED)
                first = await answer.content.readany()
                await streamed.wait()
                answer.close()  # leaves before the usage event
            for _ in range(100):  # the gateway reads the rest on its own
                if budget.spent_tokens or budget.reached():
                    break
                await asyncio.sleep(0.05)
            async with (
                aiohttp.ClientSession() as session,
                session.post(through + "/chat/completions", json=ASKED) as again,
            ):
                return first, again.status

    first, again = asyncio.run(asyncio.wait_for(main(), 60))
    assert first.startswith(b"data: ")
    if with_usage:
        assert budget.spent_tokens == 51 and budget.reached() is None
    else:
        assert again == 402, "a stream left before its usage was not counted at all"
        assert "could not be counted" in (budget.reached() or "")


@contextlib.asynccontextmanager
async def serving(
    chat: Callable[[web.Request], Awaitable[web.StreamResponse]], client_max_size: int = 2**20
) -> AsyncIterator[str]:
    """``chat`` answering ``POST /v1/chat/completions`` on 127.0.0.1; yields its base URL."""
    app = web.Application(client_max_size=client_max_size)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: Any = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()
