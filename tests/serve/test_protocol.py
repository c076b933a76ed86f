"""osmo-run serve's routes over real HTTP, one status code at a time: what a trainer sees
on the wire and what the run writes to its results file."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from osmo_run.serve.admission import DrainRate, retry_after_sec
from tests.serve.harness import LEASE, body, serving


def run(scenario: Any) -> None:
    asyncio.run(scenario)


def test_admission_202_then_the_long_poll_gives_the_result_and_the_line_is_served(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with serving(tmp_path) as server:
            response = await server.submit("r-1", metadata={"sleep": 0.3})
            assert response.status_code == 202
            admitted = response.json()
            token = admitted.pop("polling_lease_token")
            assert admitted == {
                "rollout_id": "r-1",
                "status": "queued",
                "result_wait_timeout_sec": 5.0,
                "polling_lease_timeout_sec": 30.0,
            }
            first = (await server.poll("r-1", token)).json()  # waits for a change
            assert first["status"] in ("running", "success")
            answer = await server.final("r-1", token)
            assert answer == {
                "rollout_id": "r-1",
                "status": "success",
                "sample": {
                    "messages": [
                        {"role": "user", "content": "hello"},
                        {"role": "assistant", "content": "hello"},
                    ],
                    "label": "hello",
                    "reward": 1.0,
                    "remove_sample": False,
                    "metrics": {},
                    "extra_fields": {},
                },
                "err_message": None,
                "err_category": None,
            }
            assert (await server.poll("r-1", token)).json() == answer  # read again: same
            (line,) = await server.recorded(1)
        assert line["served"] is True
        assert line["lease_sha256"] == hashlib.sha256(token.encode()).hexdigest()
        assert token not in server.results.read_text()
        assert line["status"] == "success" and line["reward"] == 1.0
        assert line["request"]["metadata"] == {"sleep": 0.3}
        assert line["request"]["label"] == "hello"

    run(scenario())


def test_wrong_lease_403_unknown_id_404_missing_lease_422(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path) as server:
            token = await server.admitted("r-1")
            wrong = await server.poll("r-1", token[:-2] + "xx")
            assert (wrong.status_code, wrong.json()) == (403, {"detail": "invalid polling lease"})
            unknown = await server.poll("nobody", token)
            assert (unknown.status_code, unknown.json()) == (404, {"detail": "unknown rollout_id"})
            missing = await server.client.get("/rollout/r-1/result")
            assert missing.status_code == 422
            assert LEASE in missing.json()["detail"]
            await server.final("r-1", token)

    run(scenario())


def test_an_id_reused_while_running_and_after_finishing_is_409_and_the_first_result_kept(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with serving(tmp_path) as server:
            token = await server.admitted("dup", metadata={"sleep": 0.3}, label="hello")
            again = await server.submit("dup", content="other", label="other")
            assert (again.status_code, again.json()) == (
                409,
                {"detail": "rollout_id is already registered"},
            )
            first = await server.final("dup", token)
            after = await server.submit("dup", content="other", label="other")
            assert after.status_code == 409
            assert (await server.final("dup", token)) == first
            assert first["sample"]["reward"] == 1.0
            await asyncio.sleep(0.2)
            assert len(server.lines()) == 1

    run(scenario())


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


BAD_BODIES: list[tuple[str, bytes, str]] = [
    ("malformed JSON", b'{"rollout_id": "a",', "body: not valid JSON"),
    ("not an object", b"[1, 2]", "body: must be a JSON object, got an array"),
    ("not UTF-8", b'{"rollout_id": "\xff"}', "body: not UTF-8"),
    ("missing fields", b'{"rollout_id": "a"}', "initial_messages: Field required (and 1 more)"),
    ("metadata not an object", json.dumps(body("a", metadata=[1])).encode(), "metadata:"),
    ("NaN timeout", json.dumps(body("a", agent_timeout_sec=float("nan"))).encode(),
     "agent_timeout_sec: must be finite"),
    ("infinite timeout", json.dumps(body("a", grader_timeout_sec=float("inf"))).encode(),
     "grader_timeout_sec: must be finite"),
    ("timeout a string", json.dumps(body("a", agent_timeout_sec="soon")).encode(),
     "agent_timeout_sec:"),
    ("empty key", json.dumps(body("a", llm_api_key="")).encode(), "llm_api_key: must be omitted"),
    ("key a number", json.dumps(body("a", llm_api_key=5)).encode(), "llm_api_key:"),
    ("label a number", json.dumps(body("a", label=5)).encode(), "label:"),
    ("grade a string", json.dumps(body("a", grade="yes")).encode(), "grade:"),
    ("id a number", json.dumps(body(7)).encode(), "rollout_id:"),  # type: ignore[arg-type]
    ("id with a slash", json.dumps(body("../etc/passwd")).encode(), "rollout_id: must be one"),
    ("id with a backslash", json.dumps(body("a\\b")).encode(), "rollout_id: must be one"),
    ("id with NUL", json.dumps(body("a\x00b")).encode(), "rollout_id: must be one"),
    ("id dot dot", json.dumps(body("..")).encode(), "rollout_id: must be a non-empty"),
    ("id dot", json.dumps(body(".")).encode(), "rollout_id: must be a non-empty"),
    ("id empty", json.dumps(body("")).encode(), "rollout_id: must be a non-empty"),
    ("id a lone surrogate", b'{"rollout_id": "a\\ud800", "initial_messages": [], '
     b'"chat_completions_url": "http://x/v1"}', "rollout_id: must be valid Unicode"),
    ("id too long", json.dumps(body("x" * 600)).encode(), "rollout_id: must be at most 512"),
    ("url not a URL", json.dumps(body("a", url="not a url")).encode(),
     "chat_completions_url: must start with http:// or https://"),
    ("url a file", json.dumps(body("a", url="file:///etc/passwd")).encode(),
     "chat_completions_url: must start with http://"),
    ("url without a host", json.dumps(body("a", url="http://")).encode(),
     "chat_completions_url: names no host"),
    ("url with a broken IPv6 host", json.dumps(body("a", url="http://[::1/v1")).encode(),
     "chat_completions_url: is not a URL"),
    ("url with port 99999", json.dumps(body("a", url="http://127.0.0.1:99999/v1")).encode(),
     "chat_completions_url: has a port that is not a number from 1 to 65535"),
    ("nested 100,000 deep", b'{"metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     "body: JSON nested deeper than 64 levels"),
    ("nested 65 deep", json.dumps(body("a", metadata={"x": _deep(65)})).encode(),
     "body: JSON nested deeper than 64 levels"),
    ("messages not a list", json.dumps({**body("a"), "initial_messages": "hi"}).encode(),
     "initial_messages:"),
]  # fmt: skip


def test_bad_bodies_answer_422_with_one_line_naming_the_field(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path) as server:
            for name, raw, expected in BAD_BODIES:
                response = await server.client.post(
                    "/rollout", content=raw, headers={"content-type": "application/json"}
                )
                assert response.status_code == 422, (name, response.text)
                detail = response.json()["detail"]
                assert isinstance(detail, str) and "\n" not in detail, name
                assert detail.startswith(expected), (name, detail)
            assert server.lines() == []
            surrogates = json.dumps(body("a", content="a\ud800b", metadata={"note": "\udfff"}))
            ok = await server.client.post("/rollout", content=surrogates)
            assert ok.status_code == 202  # lone surrogates in content are data, kept
            answer = await server.final("a", ok.json()["polling_lease_token"])
            assert answer["status"] == "success"
            assert answer["sample"]["messages"][0]["content"] == "a\ud800b"

    run(scenario())


def test_a_50_mb_body_answers_413_before_it_is_read(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path) as server:
            huge = json.dumps(body("big", content="x" * 50_000_000)).encode()
            response = await server.client.post("/rollout", content=huge)
            assert response.status_code == 413
            assert response.json() == {"detail": "body over 16777216 bytes"}
            cancel = await server.client.post("/rollout/cancel", content=huge)
            assert cancel.status_code == 413
            assert (await server.submit("small")).status_code == 202

    run(scenario())


def test_a_full_queue_answers_429_with_a_retry_after_from_the_drain_rate(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, concurrency=1, max_queued=2) as server:
            tokens = {}
            for index in range(3):  # one running, two queued
                tokens[f"q{index}"] = await server.admitted(f"q{index}", metadata={"sleep": 0.4})
                await asyncio.sleep(0.05)
            full = await server.submit("q3")
            assert full.status_code == 429
            assert full.json() == {"detail": "rollout queue is full; retry later"}
            assert int(full.headers["Retry-After"]) >= 1
            for rollout_id, token in tokens.items():
                assert (await server.final(rollout_id, token))["status"] == "success"
            health = (await server.client.get("/health")).json()
            assert health["refused_queue_full"] == 1
            assert health["drain_per_sec"] > 0
            assert (await server.submit("q3")).status_code == 202

    run(scenario())


def test_retry_after_follows_the_observed_drain_rate_not_a_constant() -> None:
    def after(per_sec: float, queued: int, max_queued: int) -> int:
        drain = DrainRate()
        for i in range(50):
            drain.observe(i / per_sec)
        return retry_after_sec(drain, queued, max_queued, 0.0, 50 / per_sec)

    assert after(100.0, 10, 10) == 1  # a fast drain: come back at once
    assert after(0.5, 10, 10) == 2  # one place frees every two seconds
    assert after(0.1, 12, 10) == 30  # three places, one per ten seconds
    assert after(0.001, 10, 10) == 60  # clamped, as osmosis's client clamps
    nothing_finished = DrainRate()
    assert retry_after_sec(nothing_finished, 5, 5, oldest_age_sec=7.2, now=0.0) == 8


def test_cancel_by_ids_prefix_and_all_answers_each_disposition(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, concurrency=1, max_queued=10) as server:
            tokens = {}
            for rollout_id in ("a-1", "a-2", "b-1", "c-1", "done"):
                tokens[rollout_id] = await server.admitted(rollout_id, metadata={"sleep": 30})
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)
            assert (await server.poll("a-1", tokens["a-1"])).json()["status"] == "running"
            by_ids = await server.cancel(ids=["a-2", "zzz"])
            assert by_ids.json() == {
                "dispositions": {"a-2": "cancelled_queued", "zzz": "not_found"}
            }
            by_prefix = await server.cancel(prefix="a-")
            assert by_prefix.json() == {
                "dispositions": {"a-1": "cancelled_running", "a-2": "not_found"}
            }
            every = (await server.cancel(all=True)).json()["dispositions"]
            # a-1's slot went to b-1 (the next queued) as soon as a-1 was cancelled
            assert every.pop("b-1") in ("cancelled_running", "cancelled_queued")
            assert every == {
                "a-1": "not_found",  # already cancelled: idempotent
                "a-2": "not_found",
                "c-1": "cancelled_queued",
                "done": "cancelled_queued",
            }
            for name, selector in [
                ("two", {"ids": ["a"], "all": True}),
                ("none", {}),
                ("ids not a list", {"ids": "a-1"}),
            ]:
                response = await server.cancel(**selector)
                assert response.status_code == 422, name
            answers = {rid: await server.final(rid, token) for rid, token in tokens.items()}
            assert {a["status"] for a in answers.values()} == {"cancelled"}
            assert answers["a-1"]["err_category"] is None
            lines = await server.recorded(5)
        assert sorted(line["rollout_id"] for line in lines) == sorted(tokens)
        assert {line["status"] for line in lines} == {"cancelled"}
        assert {line["error_message"] for line in lines} == {"cancelled by POST /rollout/cancel"}

    run(scenario())


def test_a_lapsed_lease_ends_the_rollout_lease_expired_recorded_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, concurrency=1, result_wait_sec=0.2, lease_sec=0.6) as s:
            running = await s.admitted("never-polled", metadata={"sleep": 30})
            queued = await s.admitted("queued-never-polled", metadata={"sleep": 30})
            await asyncio.sleep(1.5)
            for rollout_id, token in (("never-polled", running), ("queued-never-polled", queued)):
                answer = (await s.poll(rollout_id, token)).json()
                assert answer == {
                    "rollout_id": rollout_id,
                    "status": "failure",
                    "sample": None,
                    "err_message": "polling lease expired",
                    "err_category": "lease_expired",
                }
            polled = await s.admitted("polled", metadata={"sleep": 1.0})
            assert (await s.final("polled", polled))["status"] == "success"  # renewed by polls
            lines = await s.recorded(3)
            assert (await s.client.get("/health")).json()["lease_expiries"] == 2
        expired = {line["rollout_id"]: line for line in lines if line["rollout_id"] != "polled"}
        assert sorted(expired) == ["never-polled", "queued-never-polled"]
        assert {line["status"] for line in expired.values()} == {"cancelled"}
        assert {line["error_message"] for line in expired.values()} == {"polling lease expired"}

    run(scenario())


def test_a_server_key_guards_every_route_health_included(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, api_key="server-key-123") as server:
            assert (await server.client.get("/health")).status_code == 200
            token = await server.admitted("r")
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "x"}):
                requests = [
                    server.client.build_request("GET", "/health"),
                    server.client.build_request("POST", "/rollout", json=body("r2")),
                    server.client.build_request("GET", "/rollout/r/result"),
                    server.client.build_request("POST", "/rollout/cancel", json={"all": True}),
                ]
                for request in requests:
                    request.headers.pop("Authorization", None)
                    request.headers.update(headers)
                    request.headers[LEASE] = token
                    response = await server.client.send(request)
                    assert response.status_code == 401
                    assert response.json() == {"detail": "unauthorized"}
            assert (await server.final("r", token))["status"] == "success"

    run(scenario())


def test_health_reports_the_backend_queue_and_lifecycle(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, concurrency=1, max_queued=3) as server:
            await server.admitted("h1", metadata={"sleep": 30})
            await server.admitted("h2", metadata={"sleep": 30})
            await asyncio.sleep(0.2)
            health = (await server.client.get("/health")).json()
            assert health["status"] == "ok" and health["backend"] == "local"
            assert health["concurrency"] == {"max_concurrent": 1, "queued": 1, "running": 1}
            assert health["lifecycle"] == {"accepting_rollouts": True, "active_rollouts": 2}
            assert health["instance_id"] and health["process_id"]
            await server.cancel(all=True)

    run(scenario())


def test_stopping_answers_503_gives_in_flight_their_grace_then_records_them_cancelled(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, concurrency=1, max_queued=4, shutdown_grace_sec=1) as s:
            slow = await s.admitted("slow", metadata={"sleep": 30})
            quick = await s.admitted("quick", metadata={"sleep": 0.1})  # queued behind slow
            await asyncio.sleep(0.2)
            s.run.stop("SIGTERM")
            refused = await s.submit("late")
            assert (refused.status_code, refused.json()) == (
                503,
                {"detail": "rollout server is shutting down"},
            )
            assert (await s.poll("quick", quick)).json()["status"] == "cancelled"
            answer = await s.final("slow", slow, within=10)
            assert answer["status"] == "cancelled"
            await asyncio.wait_for(s.task, 10)
        lines = {line["rollout_id"]: line for line in s.lines()}
        assert sorted(lines) == ["quick", "slow"]
        assert {line["status"] for line in lines.values()} == {"cancelled"}

    run(scenario())


def test_the_breaker_answers_503_with_its_cause_after_k_alike_failures(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, concurrency=1, breaker=2, max_queued=8) as server:
            tokens = [
                await server.admitted(f"f{i}", metadata={"raise": "APIConnectionError"})
                for i in range(2)
            ]
            for index, token in enumerate(tokens):
                answer = await server.final(f"f{index}", token)
                assert answer["status"] == "failure"
                assert answer["err_category"] == "http_error"  # model_api_error on the wire
            await asyncio.sleep(0.2)
            refused = await server.submit("after")
            assert refused.status_code == 503
            detail = refused.json()["detail"]
            assert "\n" not in detail
            assert detail.startswith("the breaker stopped this server: 2 rollouts in a row")
            assert "model_api_error" in detail
            lines = server.lines()
        assert [line["error_category"] for line in lines] == ["model_api_error"] * 2

    run(scenario())


@pytest.mark.slow
def test_10000_admissions_racing_for_100_ids_admit_each_id_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, concurrency=8, max_queued=200) as server:
            import httpx

            transport = httpx.ASGITransport(app=server.run.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
                limit = asyncio.Semaphore(200)

                async def one(index: int) -> tuple[str, int, str | None]:
                    rollout_id = f"race-{index % 100}"
                    async with limit:
                        response = await client.post("/rollout", json=body(rollout_id))
                    token = response.json().get("polling_lease_token")
                    return rollout_id, response.status_code, token

                answers = await asyncio.gather(*(one(i) for i in range(10_000)))
            admitted = {rid: token for rid, code, token in answers if code == 202}
            codes = sorted({code for _, code, _ in answers})
            assert len(admitted) == 100 and codes == [202, 409]
            for rollout_id, token in admitted.items():
                assert token is not None
                assert (await server.final(rollout_id, token))["status"] == "success"
            lines = await server.recorded(100)
            await asyncio.sleep(0.2)
        assert sorted(line["rollout_id"] for line in server.lines()) == sorted(admitted)
        assert len(lines) == 100

    run(scenario())


def test_metrics_count_answers_outcomes_and_durations_in_prometheus_text(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, concurrency=1, max_queued=1) as server:
            good = await server.admitted("m1", metadata={"sleep": 0.2})
            bad = await server.admitted("m2", metadata={"raise": "RateLimitError"})
            assert (await server.submit("m3")).status_code == 429
            await server.final("m1", good)
            await server.final("m2", bad)
            await server.recorded(2)
            response = await server.client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        lines = set(response.text.splitlines())
        for expected in [
            "osmo_run_serve_admitted_total 2",
            "osmo_run_serve_queue_full_total 1",
            'osmo_run_serve_answers_total{route="submit",code="202"} 2',
            'osmo_run_serve_answers_total{route="submit",code="429"} 1',
            'osmo_run_serve_finished_total{status="success",category=""} 1',
            'osmo_run_serve_finished_total{status="failure",category="rate_limit"} 1',
            'osmo_run_serve_rollout_seconds_bucket{le="+Inf"} 2',
            "osmo_run_serve_rollout_seconds_count 2",
            "osmo_run_serve_queued 0",
        ]:
            assert expected in lines, expected
        assert "m1" not in response.text  # ids are never labels

    run(scenario())
