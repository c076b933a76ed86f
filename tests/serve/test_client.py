"""``osmo_run.client``: a trainer's batch through a real server, with back-pressure, and
reconnection across a server killed (-9) and restarted with ``--resume``."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from osmo_run.client import Rollout, RolloutResult, RolloutServerError, ServeClient, run_batch_sync
from tests.serve.harness import serving
from tests.serve.test_osmosis_client import _listening
from tests.serve.test_restart import _serve

URL = "http://127.0.0.1:9/v1"


def test_a_grpo_group_through_a_full_queue_comes_back_whole(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, concurrency=2, max_queued=2) as server:
            group = [
                Rollout(f"step1-q0-{k}", [{"role": "user", "content": "4"}], URL, label="4",
                        metadata={"sleep": 0.2, "policy_version": 7})
                for k in range(8)
            ]  # fmt: skip
            async with ServeClient(server.url) as client:
                results = [result async for result in client.run_batch(group)]
                with pytest.raises(RolloutServerError) as refused:
                    await client.submit(group[0])
                health = (await server.client.get("/health")).json()
        assert sorted(r.rollout_id for r in results) == sorted(r.rollout_id for r in group)
        assert all(r.ok and r.reward == 1.0 for r in results)
        assert health["refused_queue_full"] > 0  # 8 at once against 2 running + 2 queued
        assert (refused.value.status, refused.value.detail) == (
            409,
            "rollout_id is already registered",
        )

    asyncio.run(scenario())


def test_the_sync_client_reconnects_to_a_server_restarted_after_kill_9(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results_file = tmp_path / "run" / "results.jsonl"
    first = _serve(tmp_path, results_file, "--port", str(port))
    url = _listening(first)
    batch = [
        Rollout(f"r{k}", [{"role": "user", "content": "hi"}], URL, label="hi",
                metadata={"sleep": 1.5})
        for k in range(3)
    ]  # fmt: skip
    got: list[RolloutResult] = []
    failure: list[BaseException] = []

    def trainer() -> None:
        try:
            got.extend(run_batch_sync(url, batch, reconnect_sec=60))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=trainer)
    thread.start()
    admitted = results_file.with_name("results.admitted.jsonl")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if admitted.is_file() and len(admitted.read_text().splitlines()) == 3:
            break
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert first.stderr is not None
    first.stderr.close()
    second = _serve(tmp_path, results_file, "--port", str(port), "--resume")
    try:
        _listening(second)
        thread.join(60)
        assert not thread.is_alive() and not failure, failure
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
        assert second.stderr is not None
        second.stderr.close()
    assert sorted(r.rollout_id for r in got) == ["r0", "r1", "r2"]
    assert all(r.ok for r in got)
    lines = results_file.read_text().splitlines()
    assert len(lines) == 3  # run again once, written once


@contextlib.contextmanager
def _silent_server() -> Iterator[str]:
    """A server that takes connections and requests and never answers (a stopped process, a
    network that drops packets): its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        listener.close()


def test_a_server_that_never_answers_is_an_error_not_a_hang() -> None:
    """A trainer's loop must not wait forever on a server that stopped answering: a
    submission fails after ``read_timeout_sec``, a result read after that and
    ``reconnect_sec`` of asking again."""

    async def scenario(url: str) -> tuple[BaseException | None, BaseException | None, float]:
        started = time.monotonic()
        async with ServeClient(url, read_timeout_sec=0.5, reconnect_sec=1.0) as client:
            rollout = Rollout("a", [{"role": "user", "content": "4"}], URL)
            submitted = await asyncio.gather(client.submit(rollout), return_exceptions=True)
            polled = await asyncio.gather(client.result("a", "token"), return_exceptions=True)
        return submitted[0], polled[0], time.monotonic() - started  # type: ignore[return-value]

    with _silent_server() as url:
        submitted, polled, took = asyncio.run(asyncio.wait_for(scenario(url), 60))
    assert isinstance(submitted, RolloutServerError), submitted
    assert "no answer" in submitted.detail and url in submitted.detail
    assert isinstance(polled, RolloutServerError), polled
    assert "server unreachable" in polled.detail
    assert took < 30


def _answers_by_route(metrics: str) -> dict[str, int]:
    """``/metrics``' HTTP answers, summed per route."""
    counts: dict[str, int] = {}
    for line in metrics.splitlines():
        if line.startswith("osmo_run_serve_answers_total{"):
            route = line.split('route="', 1)[1].split('"', 1)[0]
            counts[route] = counts.get(route, 0) + int(line.rsplit(" ", 1)[1])
    return counts


def _mixed(prefix: str, count: int) -> list[Rollout]:
    """Rollouts that succeed, fail in the workflow, or are graded 0 (label mismatch)."""
    mixed = []
    for k in range(count):
        metadata: dict[str, object] = {"sleep": 0.05 * (k % 4)}
        if k % 5 == 3:
            metadata["raise"] = "ValueError"
        label = "4" if k % 3 else "5"
        messages = [{"role": "user", "content": "4"}]
        mixed.append(Rollout(f"{prefix}-{k}", messages, URL, label=label, metadata=metadata))
    return mixed


def _comparable(result: RolloutResult) -> tuple[object, ...]:
    return (result.status, result.reward, result.messages, result.error_category)


def test_the_client_batches_and_its_results_equal_the_per_rollout_path(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[RolloutResult], list[RolloutResult], dict[str, int]]:
        async with serving(tmp_path, concurrency=4, max_queued=6, result_wait_sec=2) as server:
            async with ServeClient(server.url, batch=False) as single:
                one_by_one = [r async for r in single.run_batch(_mixed("single", 30))]
            before = _answers_by_route((await server.client.get("/metrics")).text)
            async with ServeClient(server.url) as client:
                batched = [r async for r in client.run_batch(_mixed("batch", 30))]
                with pytest.raises(RolloutServerError) as refused:
                    await client.submit(_mixed("batch", 1)[0])
                with pytest.raises(RolloutServerError) as wrong:
                    await client.result("batch-1", "not-its-token")
            after = _answers_by_route((await server.client.get("/metrics")).text)
        assert (refused.value.status, refused.value.detail) == (
            409,
            "rollout_id is already registered",
        )
        assert (wrong.value.status, wrong.value.detail) == (403, "invalid polling lease")
        return one_by_one, batched, {k: after[k] - before.get(k, 0) for k in after}

    one_by_one, batched, requests = asyncio.run(scenario())
    single = {r.rollout_id.split("-")[1]: _comparable(r) for r in one_by_one}
    batch = {r.rollout_id.split("-")[1]: _comparable(r) for r in batched}
    assert batch == single and len(batch) == 30
    assert {s[0] for s in batch.values()} == {"success", "failure"}
    assert {s[1] for s in batch.values()} >= {0.0, 1.0}
    # the batching client sent no per-rollout request
    assert requests.get("submit", 0) == 0 and requests.get("result", 0) == 0
    assert requests["submit_batch"] > 0 and requests["results_batch"] > 0


def test_a_thousand_rollouts_in_flight_take_a_few_dozen_requests(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[RolloutResult], dict[str, int]]:
        async with serving(tmp_path, concurrency=250, max_queued=1000) as server:
            rollouts = [
                Rollout(f"r{k}", [{"role": "user", "content": "4"}], URL, label="4",
                        metadata={"sleep": 0.5})
                for k in range(1000)
            ]  # fmt: skip
            async with ServeClient(server.url) as client:
                results = [r async for r in client.run_batch(rollouts)]
            return results, _answers_by_route((await server.client.get("/metrics")).text)

    results, requests = asyncio.run(scenario())
    assert len(results) == 1000 and all(r.ok and r.reward == 1.0 for r in results)
    assert requests["submit_batch"] == 1  # one request admits all 1,000
    # a read answers every rollout finished by the time it is served: at most a few dozen
    # reads for 1,000 rollouts finishing in 4 waves (2,000 requests one by one)
    assert requests["results_batch"] < 200, requests


def test_the_client_falls_back_to_a_request_per_rollout_without_batch_routes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import functools

    from osmo_run.serve import session

    monkeypatch.setattr(session, "create_app", functools.partial(session.create_app, batch=False))

    async def scenario() -> tuple[list[RolloutResult], dict[str, int]]:
        async with serving(tmp_path, concurrency=4, max_queued=2) as server:
            assert "batch" not in (await server.client.get("/health")).json()
            async with ServeClient(server.url) as client:
                results = [r async for r in client.run_batch(_mixed("old", 8))]
            return results, _answers_by_route((await server.client.get("/metrics")).text)

    results, requests = asyncio.run(scenario())
    assert sorted(r.rollout_id for r in results) == sorted(f"old-{k}" for k in range(8))
    assert requests["submit"] >= 8 and requests["result"] >= 8
    assert "submit_batch" not in requests and "results_batch" not in requests


def test_a_batched_submission_gives_up_at_the_admission_timeout(tmp_path: Path) -> None:
    async def scenario() -> tuple[BaseException | None, float]:
        async with serving(tmp_path, concurrency=1, max_queued=1) as server:
            await server.admitted("running", metadata={"sleep": 30})
            await server.admitted("queued", metadata={"sleep": 30})
            async with ServeClient(server.url, admission_timeout_sec=0.5) as client:
                started = time.monotonic()
                late = Rollout("late", [{"role": "user", "content": "4"}], URL)
                refused = await asyncio.gather(client.submit(late), return_exceptions=True)
                return refused[0], time.monotonic() - started

    refused, took = asyncio.run(scenario())
    assert isinstance(refused, RolloutServerError), refused
    assert (refused.status, refused.detail) == (429, "admission timed out: the queue stayed full")
    assert took < 5


def test_a_rollout_json_cannot_encode_fails_alone_in_its_batch(tmp_path: Path) -> None:
    async def scenario() -> list[RolloutResult | BaseException]:
        async with serving(tmp_path, concurrency=4, max_queued=8) as server:
            rollouts = [
                Rollout(f"e{k}", [{"role": "user", "content": "4"}], URL, label="4",
                        metadata={"tags": {"a", "set"}} if k == 1 else None)
                for k in range(4)
            ]  # fmt: skip
            async with ServeClient(server.url) as client:
                return await asyncio.gather(
                    *(client.run(rollout) for rollout in rollouts), return_exceptions=True
                )

    outcomes = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert isinstance(outcomes[1], TypeError), outcomes[1]
    assert all(isinstance(o, RolloutResult) and o.ok for k, o in enumerate(outcomes) if k != 1)


@contextlib.asynccontextmanager
async def _stub_batch_server(read: Any) -> AsyncIterator[str]:
    """A server advertising batch routes that admits every item (token ``t-<id>``) and
    answers ``POST /rollouts/results`` with ``read(request)``: its URL."""
    from aiohttp import web

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"batch": {"max_items": 16}})

    async def submit(request: web.Request) -> web.Response:
        items = (await request.json())["rollouts"]
        answers = [
            {
                "rollout_id": i["rollout_id"],
                "status": 202,
                "polling_lease_token": f"t-{i['rollout_id']}",
            }
            for i in items
        ]
        return web.json_response({"answers": answers, "result_wait_timeout_sec": 0.2})

    app = web.Application()
    app.add_routes(
        [
            web.get("/health", health),
            web.post("/rollouts", submit),
            web.post("/rollouts/results", read),
        ]
    )
    runner = web.AppRunner(app, shutdown_timeout=0.1)  # a read handler may never return
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def _answer(rollout_id: str, reward: float) -> dict[str, Any]:
    sample = {"messages": [], "label": None, "reward": reward, "remove_sample": False,
              "metrics": {}, "extra_fields": {}}  # fmt: skip
    return {"rollout_id": rollout_id, "status": "success", "sample": sample,
            "err_message": None, "err_category": None}  # fmt: skip


def test_a_batch_server_that_stops_answering_reads_is_an_error_not_a_hang() -> None:
    """A server that admits a batch and then never answers a read (a stopped process): each
    read gives up after ``read_timeout_sec`` beyond the announced long-poll, and the
    rollouts fail after ``reconnect_sec`` of asking again."""
    from aiohttp import web

    async def never(request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def scenario() -> tuple[list[BaseException | RolloutResult], float]:
        async with _stub_batch_server(never) as url:
            started = time.monotonic()
            async with ServeClient(url, read_timeout_sec=0.3, reconnect_sec=1.0) as client:
                rollouts = [
                    Rollout(f"s{k}", [{"role": "user", "content": "4"}], URL) for k in range(3)
                ]
                outcomes = await asyncio.gather(
                    *(client.run(r) for r in rollouts), return_exceptions=True
                )
            return outcomes, time.monotonic() - started

    outcomes, took = asyncio.run(asyncio.wait_for(scenario(), 60))
    for outcome in outcomes:
        assert isinstance(outcome, RolloutServerError), outcome
        assert outcome.status == 0 and "server unreachable" in outcome.detail
    assert took < 20


def test_a_read_answering_for_a_rollout_it_was_not_asked_for_is_not_taken() -> None:
    """Only the leases a read carried are settled by its answer: a result under the id of
    a rollout another read is waiting on never becomes that rollout's result."""
    from aiohttp import web

    second_read = asyncio.Event()

    async def read(request: web.Request) -> web.Response:
        leases: dict[str, str] = (await request.json())["leases"]
        if leases == {"first": "t-first"} and not second_read.is_set():
            await second_read.wait()  # answers, wrongly, for the rollout the other read asks
            bogus = [_answer("second", 0.5)]
            return web.json_response({"finished": bogus, "pending": ["first"], "refused": []})
        if "second" in leases and not second_read.is_set():
            second_read.set()
            await asyncio.sleep(0.3)  # the bogus answer arrives first
        finished = [_answer(rollout_id, 1.0) for rollout_id in leases]
        return web.json_response({"finished": finished, "pending": [], "refused": []})

    async def scenario() -> list[RolloutResult]:
        async with _stub_batch_server(read) as url, ServeClient(url) as client:
            first = asyncio.ensure_future(client.result("first", "t-first"))
            await asyncio.sleep(0.1)  # the first read is in flight
            second = await client.result("second", "t-second")
            return [await first, second]

    first, second = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert (first.rollout_id, first.reward) == ("first", 1.0)
    assert (second.rollout_id, second.reward) == ("second", 1.0)
