"""osmo-run's own batch routes: ``POST /rollouts`` admits many rollouts in one request, each
exactly as one ``POST /rollout`` would be; ``POST /rollouts/results`` long-polls many
leases at once, each read exactly as one ``GET /rollout/{id}/result`` would be. Hostile
batches (huge, duplicated, malformed) are answered per item or refused in one line."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from osmo_run.serve.app import MAX_BATCH_ITEMS
from tests.serve.harness import LEASE, Server, body, serving
from tests.serve.test_osmosis_client import _listening
from tests.serve.test_restart import _serve

TERMINAL = ("success", "failure", "cancelled")


async def _submit(server: Server, items: list[Any]) -> list[dict[str, Any]]:
    raw = json.dumps({"rollouts": items}).encode()  # NaN as JSON's NaN, as a trainer may send
    response = await server.client.post("/rollouts", content=raw)
    assert response.status_code == 200, response.text
    answers: list[dict[str, Any]] = response.json()["answers"]
    return answers


async def _poll(server: Server, leases: dict[str, str]) -> dict[str, Any]:
    response = await server.client.post("/rollouts/results", json={"leases": leases})
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


async def _finals(server: Server, leases: dict[str, str], within: float = 30) -> dict[str, Any]:
    """Batch-poll until every lease has its terminal answer (asserts no refusal)."""
    finals: dict[str, Any] = {}
    left = dict(leases)
    async with asyncio.timeout(within):
        while left:
            reply = await _poll(server, left)
            assert reply["refused"] == [], reply
            for answer in reply["finished"]:
                assert answer["status"] in TERMINAL
                finals[answer["rollout_id"]] = answer
                del left[answer["rollout_id"]]
            assert sorted(reply["pending"]) == sorted(left)
    return finals


def test_a_batch_is_admitted_item_by_item_as_single_submissions_are(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, max_queued=16) as server:
            single = await server.admitted("taken")
            items: list[Any] = [
                body("a"),
                body("taken"),
                {"rollout_id": "no-messages", "chat_completions_url": "http://127.0.0.1:9/v1"},
                body("nan", agent_timeout_sec=float("nan")),
                body("meta", metadata=["not", "an", "object"]),
                "not an object",
                body("a"),  # twice in one batch: the second is a reuse
                body("b", label="b", content="b"),
            ]
            answers = await _submit(server, items)
            got = [(a["rollout_id"], a["status"], a.get("detail")) for a in answers]
            assert got == [
                ("a", 202, None),
                ("taken", 409, "rollout_id is already registered"),
                ("no-messages", 422, "initial_messages: Field required"),
                ("nan", 422, "agent_timeout_sec: must be finite; omit it to run unbounded"),
                ("meta", 422, "metadata: Input should be a valid dictionary"),
                (None, 422, "body: must be a JSON object, got a string"),
                ("a", 409, "rollout_id is already registered"),
                ("b", 202, None),
            ]
            # the same one-line details a single POST /rollout gives
            one = await server.client.post("/rollout", content=json.dumps(items[3]).encode())
            assert (one.status_code, one.json()["detail"]) == (422, answers[3]["detail"])
            tokens = {
                a["rollout_id"]: a["polling_lease_token"] for a in answers if a["status"] == 202
            }
            finals = await _finals(server, tokens)
            # a batch-admitted rollout reads through the single route too, with its token
            assert (await server.final("a", tokens["a"])) == finals["a"]
            assert (await server.final("taken", single))["status"] == "success"
            lines = await server.recorded(3)
        assert {k: v["sample"]["reward"] for k, v in finals.items()} == {"a": 1.0, "b": 1.0}
        assert sorted(line["rollout_id"] for line in lines) == ["a", "b", "taken"]
        first = json.loads((tmp_path / "results.admitted.jsonl").read_text().splitlines()[1])
        assert first["rollout_id"] == "a" and "initial_messages" in first  # journaled

    asyncio.run(scenario())


def test_an_item_nested_as_deep_as_a_single_body_may_be_is_admitted(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, max_queued=8) as server:
            nested: Any = 1
            for _ in range(63):  # the body, its metadata and 63 levels: at the limit
                nested = {"n": nested}
            single = await server.client.post("/rollout", json=body("one", metadata=nested))
            answers = await _submit(server, [body("two", metadata=nested)])
            deeper = {"n": nested}
            one_deeper = await server.client.post("/rollout", json=body("x", metadata=deeper))
            batch_deeper = await server.client.post(
                "/rollouts", json={"rollouts": [body("y", metadata=deeper)]}
            )
        assert single.status_code == 202, single.text
        assert answers[0]["status"] == 202, answers
        assert (one_deeper.status_code, one_deeper.json()["detail"]) == (
            422,
            "body: JSON nested deeper than 64 levels",
        )
        assert (batch_deeper.status_code, batch_deeper.json()["detail"]) == (
            422,
            "rollouts: an item nests JSON deeper than 64 levels",
        )

    asyncio.run(scenario())


def test_the_items_beyond_the_queue_are_429d_with_a_retry_after(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, concurrency=1, max_queued=2) as server:
            items = [body(f"q{k}", metadata={"sleep": 30}) for k in range(6)]
            answers = await _submit(server, items)
            health = (await server.client.get("/health")).json()
            server.run.rollouts.refuse_new("rollout server is shutting down")
            refused = await _submit(server, [body("late"), body("later")])
        assert [a["status"] for a in answers] == [202, 202, 429, 429, 429, 429]
        assert all(1 <= a["retry_after_sec"] <= 60 for a in answers[2:])
        assert {a["detail"] for a in answers[2:]} == {"rollout queue is full; retry later"}
        assert health["refused_queue_full"] == 4 and health["admitted"] == 2
        assert [(a["status"], a["detail"]) for a in refused] == [
            (503, "rollout server is shutting down")
        ] * 2

    asyncio.run(scenario())


def test_a_results_poll_answers_each_lease_alone(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, result_wait_sec=0.3) as server:
            answers = await _submit(
                server, [body("done"), body("slow", metadata={"sleep": 30}), body("other")]
            )
            done, slow, _ = (a["polling_lease_token"] for a in answers)
            single = await server.final("done", done)
            reply = await _poll(server, {"done": done, "slow": slow, "other": slow, "ghost": done})
            metrics = (await server.client.get("/metrics")).text
        assert reply["finished"] == [single]
        assert reply["pending"] == ["slow"]
        assert sorted(reply["refused"], key=lambda r: r["rollout_id"]) == [
            {"rollout_id": "ghost", "status": 404, "detail": "unknown rollout_id"},
            {"rollout_id": "other", "status": 403, "detail": "invalid polling lease"},
        ]
        assert 'osmo_run_serve_answers_total{route="submit_batch",code="200"} 1' in metrics
        assert 'osmo_run_serve_answers_total{route="results_batch",code="200"} 1' in metrics

    asyncio.run(scenario())


def test_the_batch_poll_renews_leases_and_ends_a_lapsed_one(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, result_wait_sec=0.3, lease_sec=1.0) as server:
            answers = await _submit(
                server,
                [body("kept", metadata={"sleep": 2.0}), body("lapsed", metadata={"sleep": 30})],
            )
            kept, lapsed = (a["polling_lease_token"] for a in answers)
            async with asyncio.timeout(30):  # poll "kept" alone: "lapsed" is never renewed
                while not (reply := await _poll(server, {"kept": kept}))["finished"]:
                    assert reply["pending"] == ["kept"]
            expired = await _poll(server, {"lapsed": lapsed})
        assert reply["finished"][0]["status"] == "success"
        assert expired["finished"] == [
            {
                "rollout_id": "lapsed",
                "status": "failure",
                "sample": None,
                "err_message": "polling lease expired",
                "err_category": "lease_expired",
            }
        ]

    asyncio.run(scenario())


def test_a_poll_answers_as_soon_as_one_lease_finishes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, result_wait_sec=20) as server:
            answers = await _submit(
                server,
                [body("quick", metadata={"sleep": 0.3}), body("long", metadata={"sleep": 30})],
            )
            leases = {a["rollout_id"]: a["polling_lease_token"] for a in answers}
            started = time.monotonic()
            reply = await _poll(server, leases)
            waited = time.monotonic() - started
        assert [a["rollout_id"] for a in reply["finished"]] == ["quick"]
        assert reply["pending"] == ["long"]
        assert waited < 10  # not the 20 s wait

    asyncio.run(scenario())


def test_batch_routes_need_the_server_key_and_health_advertises_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, api_key="server-key-1") as server:
            health = (await server.client.get("/health")).json()
            async with httpx.AsyncClient(base_url=server.url) as anonymous:
                submit = await anonymous.post("/rollouts", json={"rollouts": [body("x")]})
                poll = await anonymous.post("/rollouts/results", json={"leases": {"x": "t"}})
            admitted = await _submit(server, [body("x")])
        assert health["batch"] == {"max_items": MAX_BATCH_ITEMS}
        assert (submit.status_code, submit.json()) == (401, {"detail": "unauthorized"})
        assert (poll.status_code, poll.json()) == (401, {"detail": "unauthorized"})
        assert admitted[0]["status"] == 202

    asyncio.run(scenario())


def test_hostile_batches_are_refused_in_one_line(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, max_queued=8, max_body_bytes=4 * 1024 * 1024) as server:
            post = server.client.post
            over = [body(f"o{k}") for k in range(MAX_BATCH_ITEMS + 1)]
            huge = await post("/rollouts", json={"rollouts": over})
            many = {f"id{k}": "t" for k in range(100_000)}
            poll = await post("/rollouts/results", json={"leases": many})
            big = await post("/rollouts", json={"rollouts": [body("big", content="x" * 5_000_000)]})
            shapes = [
                await post("/rollouts", json={"rollouts": {"a": 1}}),
                await post("/rollouts", json=[body("a")]),
                await post("/rollouts", content=b"{not json"),
                await post("/rollouts/results", json={"leases": ["a"]}),
                await post("/rollouts/results", json={"leases": {"a": 7}}),
                await post("/rollouts/results", json={"leases": {}}),
            ]
            health = (await server.client.get("/health")).json()
        assert (huge.status_code, huge.json()) == (
            413,
            {"detail": f"rollouts: at most {MAX_BATCH_ITEMS} items per request"},
        )
        assert poll.status_code == 413 and "\n" not in poll.json()["detail"]
        assert (big.status_code, big.json()) == (413, {"detail": "body over 4194304 bytes"})
        assert [r.status_code for r in shapes] == [422] * 6
        for response in shapes:
            detail = response.json()["detail"]
            assert detail and "\n" not in detail and "Traceback" not in detail
        assert health["admitted"] == 0  # nothing of a refused batch was admitted

    asyncio.run(scenario())


def test_kill_9_then_resume_answers_batch_admitted_rollouts_to_their_tokens(
    tmp_path: Path,
) -> None:
    results = tmp_path / "run" / "results.jsonl"
    first = _serve(tmp_path, results)
    url = _listening(first)
    items = [body(f"k{i}", metadata={"sleep": 0.05 if i < 2 else 1.5}) for i in range(6)]
    with httpx.Client(base_url=url, timeout=30) as client:
        answers = client.post("/rollouts", json={"rollouts": items}).json()["answers"]
        leases = {a["rollout_id"]: a["polling_lease_token"] for a in answers}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            results.is_file() and len(results.read_text().splitlines()) >= 2
        ):
            time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert first.stderr is not None
    first.stderr.close()
    second = _serve(tmp_path, results, "--resume")
    try:
        url = _listening(second)
        finals: dict[str, Any] = {}
        with httpx.Client(base_url=url, timeout=60) as client:
            deadline = time.monotonic() + 60
            while len(finals) < 6 and time.monotonic() < deadline:
                left = {k: v for k, v in leases.items() if k not in finals}
                reply = client.post("/rollouts/results", json={"leases": left}).json()
                assert reply["refused"] == [], reply
                finals.update({a["rollout_id"]: a for a in reply["finished"]})
            single = client.get("/rollout/k0/result", headers={LEASE: leases["k0"]}).json()
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
        assert second.stderr is not None
        second.stderr.close()
    assert sorted(finals) == [f"k{i}" for i in range(6)]
    assert {a["status"] for a in finals.values()} == {"success"}
    assert single == finals["k0"]
    ids = [json.loads(line)["rollout_id"] for line in results.read_text().splitlines()]
    assert sorted(ids) == sorted(leases)  # each id's final line once
