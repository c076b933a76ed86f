"""Adaptive concurrency per model endpoint, through the real ``osmo-run local``.

The endpoint is :mod:`tests.llm.slot_stub`: it answers at most 40 calls at once and HTTP 429
above that, as a provider's concurrency limit does (a paid model API cannot be reached
here). At concurrency 200, the adaptive limit (the default) finds the 40 and keeps its 429s
bounded; ``llm.max_concurrency: 200`` fixed shows the storm it prevents. The limiter itself
is also driven against a simulated endpoint, where its bound is exact.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from osmo_run.errors import BudgetExceededError, ExitCode
from osmo_run.sdk.model_budget import RunBudget
from osmo_run.sdk.model_layer import ModelLayer, answered, model_call, use_model_layer
from osmo_run.sdk.model_limits import (
    ACCEPTED_AFTER_SEC,
    INITIAL_LIMIT,
    EndpointLimit,
    ModelLimits,
    Outcome,
)
from tests.conftest import CLI, cli_env, read_jsonl
from tests.llm.endpoint_runs import ENV, write_rows, write_spec
from tests.llm.slot_stub import SlotStub, serve_slots

SLOTS = 40
ROWS = 600


def _spec(tmp_path: Path, **fields: Any) -> Path:
    return write_spec(tmp_path, **{"concurrency": 200, **fields})


def _run(cli: CLI, tmp_path: Path, spec: Path, rows: int = ROWS) -> tuple[int, str, Path]:
    """The real console script in a process of its own: the stub's thread and the run
    then do not take turns on one interpreter lock, which would bunch answers together."""
    output = tmp_path / "out" / "results.jsonl"
    proc = cli.subprocess(
        "local",
        write_rows(tmp_path, rows),
        "--spec",
        spec,
        "-o",
        output,
        "--display",
        "plain",
        timeout=300,
        env=cli_env(**ENV),
    )
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text
    return proc.returncode, text, output


def _summary(output: Path) -> dict[str, Any]:
    return dict(json.loads(output.with_name("results.summary.json").read_text()))


def test_adaptive_limit_finds_the_endpoints_40_slots_with_bounded_429s(
    cli: CLI, tmp_path: Path
) -> None:
    with serve_slots(SlotStub(slots=SLOTS, delay_sec=0.05)) as stub:
        spec = _spec(tmp_path, llm={"base_url": stub.base_url, "model": "stub-model"})
        code, text, output = _run(cli, tmp_path, spec)

    assert code == ExitCode.OK, text
    records = read_jsonl(output)
    assert len(records) == ROWS and {r["status"] for r in records} == {"success"}
    assert stub.answered == ROWS and stub.peak <= SLOTS
    # The bound: while the limit is found, at most twice the endpoint's own limit (slow
    # start doubles the limit per round: it passes 40 by at most 40 more, then halving
    # it may leave it a few over), then a 429 now and then as it probes past 40 again:
    # at most 2 x 40 + 5 % of the calls.
    assert stub.throttled <= 2 * SLOTS + ROWS // 20, stub.throttled
    (limit,) = _summary(output)["model_limits"]
    assert limit["endpoint"] == stub.base_url.removesuffix("/v1")
    assert limit["mode"] == "adaptive" and limit["ceiling"] == 200
    assert limit["throttled"] == stub.throttled
    assert limit["calls"] == stub.calls
    # The first 429 halved the limit it came at (the highest so far), and it never went
    # above the run's concurrency. Where the limit stood is the endpoint's doing, not a
    # property to assert: on a loaded machine the stub takes its calls in slowly, so more
    # of them wait client-side without a 429 and slow start runs further before its first.
    assert stub.throttled > 0, "the endpoint's 40 slots were reached"
    assert limit["min"] <= (limit["max"] + 1) // 2, limit
    assert 1 <= limit["min"] <= limit["final"] <= limit["max"] <= 200, limit
    # what the person watching sees: the limit, out of the run's concurrency, and the 429s
    finished = next(line for line in text.splitlines() if line.startswith("finished: "))
    assert f"· model slots {limit['final']}/200 · 429s {stub.throttled}" in finished
    assert f"adaptive: min {limit['min']} · final {limit['final']} of 200" in text


def test_a_fixed_limit_of_200_shows_the_storm_adaptive_prevents(cli: CLI, tmp_path: Path) -> None:
    with serve_slots(SlotStub(slots=SLOTS, delay_sec=0.05)) as stub:
        llm = {"base_url": stub.base_url, "model": "stub-model", "max_concurrency": 200}
        code, text, output = _run(cli, tmp_path, _spec(tmp_path, llm=llm))

    (limit,) = _summary(output)["model_limits"]
    assert limit["mode"] == "fixed" and limit["min"] == limit["final"] == 200
    # 200 calls at once against 40 slots: 160 answered 429 at the start alone, and every
    # wave of retries again
    assert stub.throttled >= 160 and limit["throttled"] == stub.throttled, stub.throttled
    assert stub.throttled > 2 * SLOTS + ROWS // 20, "more than adaptive's bound"
    assert "model slots 200/200 fixed" in text
    assert code in (ExitCode.OK, ExitCode.ROLLOUTS_FAILED), text


def test_the_judges_endpoint_has_a_limit_of_its_own(cli: CLI, tmp_path: Path) -> None:
    model = SlotStub(slots=SLOTS, delay_sec=0.02)
    judge = SlotStub(slots=4, delay_sec=0.05, reply="GRADE: C")
    with serve_slots(model), serve_slots(judge):
        spec = _spec(
            tmp_path,
            llm={"base_url": model.base_url, "model": "stub-model"},
            judge={"base_url": judge.base_url, "model": "stub-judge"},
            grader="osmo_run.graders:ModelJudge",
            grader_config={"settings": {"rubric": "any greeting"}},
        )
        code, text, output = _run(cli, tmp_path, spec, rows=200)

    assert code == ExitCode.OK, text
    assert {r["reward"] for r in read_jsonl(output)} == {1.0}
    assert judge.answered == 200 and judge.peak <= 4
    limits = {limit["endpoint"]: limit for limit in _summary(output)["model_limits"]}
    judge_limit = limits[judge.base_url.removesuffix("/v1")]
    # the same bound: at most twice the judge's 4 while it is found, then a few
    assert 0 < judge_limit["throttled"] == judge.throttled <= 2 * 4 + 200 // 20
    assert judge_limit["min"] < 4
    assert limits[model.base_url.removesuffix("/v1")]["throttled"] == model.throttled


def test_a_regrade_keeps_the_judge_under_its_endpoints_limit(cli: CLI, tmp_path: Path) -> None:
    """``osmo-run regrade`` calls the judge as a run does: through an adaptive limit, so a
    judge endpoint of 4 slots at ``--concurrency 50`` grades every row with few 429s."""
    model = SlotStub(slots=SLOTS, delay_sec=0.01)
    judge = SlotStub(slots=4, delay_sec=0.05, reply="GRADE: C")
    with serve_slots(model), serve_slots(judge):
        spec = _spec(tmp_path, llm={"base_url": model.base_url, "model": "stub-model"})
        code, text, output = _run(cli, tmp_path, spec, rows=200)
        assert code == ExitCode.OK, text
        judge_spec = _spec(
            tmp_path,
            judge={"base_url": judge.base_url, "model": "stub-judge"},
            grader="osmo_run.graders:ModelJudge",
            grader_config={"settings": {"rubric": "any greeting"}},
        )
        proc = cli.subprocess(
            "regrade", output.parent, "--spec", judge_spec, "--concurrency", "50",
            timeout=300, env=cli_env(**ENV),
        )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == ExitCode.OK, text
    (regraded,) = output.parent.parent.glob("out-regrade-*/results.jsonl")
    assert [r["reward"] for r in read_jsonl(regraded)] == [1.0] * 200
    assert judge.answered == 200
    # without a limit 50 graders at once draw ~145 429s here; with it, twice the judge's 4
    # while the limit is found, then one now and then as it probes (one call in 10 at most
    # on a 4-slot endpoint, all calls at once, a loaded machine)
    assert judge.throttled <= 2 * 4 + 200 // 10, judge.throttled
    summary = json.loads(regraded.with_name("results.summary.json").read_text())
    (limit,) = summary["model_limits"]
    assert limit["endpoint"] == judge.base_url.removesuffix("/v1")
    assert limit["throttled"] == judge.throttled and limit["min"] < 4


async def _simulate(limit: EndpointLimit, capacity: int, calls: int) -> list[int]:
    """``calls`` calls (each retried after a 429) against an endpoint admitting
    ``capacity`` at once; the limits seen when a call was answered."""
    busy = 0
    seen: list[int] = []

    async def call() -> None:
        nonlocal busy
        while True:
            async with limit.slot() as slot:
                if busy >= capacity:
                    slot.done(Outcome.THROTTLED)
                    throttled = True
                else:
                    busy += 1
                    await asyncio.sleep(0.002)
                    busy -= 1
                    slot.done(Outcome.ANSWERED)
                    throttled = False
            if not throttled:
                seen.append(limit.limit)
                return
            await asyncio.sleep(0.005)

    await asyncio.gather(*(call() for _ in range(calls)))
    return seen


def test_the_limit_backs_off_on_429_and_never_passes_the_runs_concurrency() -> None:
    limit = EndpointLimit("http://x", ceiling=200)
    assert limit.limit == INITIAL_LIMIT
    seen = asyncio.run(_simulate(limit, capacity=40, calls=3000))
    assert max(seen) <= 2 * 40 and limit.max <= 200
    assert limit.throttled <= 40 + 3000 // 20
    # after the first back-off it swings between 75 % and a little over 100 % of 40
    assert limit.min >= 40 * 0.5 * 0.75 and limit.limit <= 42


def test_without_429s_the_limit_grows_to_the_runs_concurrency_and_no_further() -> None:
    limit = EndpointLimit("http://x", ceiling=50)
    asyncio.run(_simulate(limit, capacity=1000, calls=500))
    assert limit.limit == limit.max == 50 and limit.throttled == 0


def test_a_slow_endpoint_that_never_says_429_gets_every_call_before_the_first_answer() -> None:
    """Slow start counts a call in flight ACCEPTED_AFTER_SEC without a 429 as accepted: 512
    calls of 3 s each are all in flight long before the first answer, where growing only
    on answers would have 8 in flight until 3 s and reach 512 only after 18 s."""

    async def main() -> tuple[int, float]:
        limit = EndpointLimit("http://x", ceiling=512)
        loop = asyncio.get_running_loop()
        started = loop.time()
        in_flight = 0
        peak_before_an_answer = 0
        first_answer_at = 0.0

        async def call() -> None:
            nonlocal in_flight, peak_before_an_answer, first_answer_at
            async with limit.slot() as slot:
                in_flight += 1
                if not first_answer_at:
                    peak_before_an_answer = max(peak_before_an_answer, in_flight)
                await asyncio.sleep(3.0)
                first_answer_at = first_answer_at or loop.time() - started
                in_flight -= 1
                slot.done(Outcome.ANSWERED)

        await asyncio.gather(*(call() for _ in range(512)))
        assert limit.throttled == 0 and limit.max <= 512
        return peak_before_an_answer, first_answer_at

    peak, first_answer_at = asyncio.run(main())
    assert peak == 512, f"{peak} calls in flight before the first answer at {first_answer_at:.1f} s"


def test_calls_answered_as_the_clock_accepts_them_still_grow_the_limit() -> None:
    """Calls of about ACCEPTED_AFTER_SEC are accepted by the clock and answered at once:
    their answers must still grow the limit (a version that counted them once, on the
    clock, stalled at 32 of 1,000 and took 24 s for what takes 3)."""

    async def main() -> EndpointLimit:
        limit = EndpointLimit("http://x", ceiling=1000)

        async def call() -> None:
            async with limit.slot() as slot:
                await asyncio.sleep(ACCEPTED_AFTER_SEC)
                slot.done(Outcome.ANSWERED)

        await asyncio.gather(*(call() for _ in range(4000)))
        return limit

    limit = asyncio.run(main())
    assert limit.throttled == 0 and limit.max == 1000, limit.stats()


def test_a_429_ends_the_clocked_slow_start() -> None:
    """An endpoint admitting 40 slow calls: the clock doubles the limit until the first 429
    halves it; the limit then never passes twice what the endpoint admits."""
    limit = EndpointLimit("http://x", ceiling=1000)

    async def main() -> None:
        busy = 0

        async def call() -> None:
            nonlocal busy
            while True:
                async with limit.slot() as slot:
                    if busy >= 40:
                        slot.done(Outcome.THROTTLED)
                    else:
                        busy += 1
                        await asyncio.sleep(0.5)
                        busy -= 1
                        slot.done(Outcome.ANSWERED)
                        return
                await asyncio.sleep(0.05)

        await asyncio.gather(*(call() for _ in range(400)))

    asyncio.run(main())
    assert 0 < limit.throttled <= 64 + 400 // 20, limit.stats()
    assert limit.min <= 40 and limit.limit <= 2 * 40, limit.stats()


def test_a_fixed_limit_never_moves() -> None:
    limit = EndpointLimit("http://x", ceiling=200, fixed=200)
    asyncio.run(_simulate(limit, capacity=40, calls=400))
    assert limit.limit == limit.min == limit.max == 200 and limit.throttled >= 160


def test_a_call_cancelled_while_it_waits_takes_no_slot() -> None:
    async def main() -> None:
        limit = EndpointLimit("http://x", ceiling=1, fixed=1)
        first = limit.slot()
        await first.__aenter__()
        waiting = asyncio.ensure_future(limit.acquire())
        await asyncio.sleep(0)
        assert limit.waiting == 1 and limit.in_flight == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert limit.waiting == 0
        await first.__aexit__(None, None, None)
        assert limit.in_flight == 0
        async with limit.slot():  # the slot is free again
            assert limit.in_flight == 1

    asyncio.run(main())


def test_what_counts_as_the_endpoint_saying_it_is_full() -> None:
    assert answered(429, {}) is Outcome.THROTTLED
    assert answered(503, {"retry-after": "2"}) is Outcome.THROTTLED
    assert answered(503, {"retry-after-ms": "200"}) is Outcome.THROTTLED
    assert answered(503, {}) is Outcome.NEUTRAL, "a 503 alone may be an outage, not a limit"
    assert answered(500, {"retry-after": "2"}) is Outcome.NEUTRAL
    assert answered(None) is Outcome.NEUTRAL, "no answer says nothing about the limit"
    assert answered(200, {}) is Outcome.ANSWERED
    assert answered(400, {}) is Outcome.ANSWERED, "the endpoint had room to refuse it"


def test_a_try_gives_its_slot_back_however_it_ends() -> None:
    """``model_call`` holds one slot per try: back when the try's code raises, and when the
    budget refuses the try (then it counts as not sent, and nothing is held)."""
    url = "http://127.0.0.1:9/v1/chat/completions"
    layer = ModelLayer(ModelLimits(4), RunBudget(model_calls=1))
    limit = layer.limits.for_url(url)
    in_flight: list[int] = []

    async def main() -> None:
        use_model_layer(layer)
        with pytest.raises(RuntimeError, match="the client failed"):
            async with model_call(url):
                in_flight.append(limit.in_flight)
                raise RuntimeError("the client failed")
        in_flight.append(limit.in_flight)
        with pytest.raises(BudgetExceededError, match="budget is spent"):
            async with model_call(url):
                in_flight.append(-1)  # never: the one call the budget allows was made
        in_flight.append(limit.in_flight)

    asyncio.run(main())
    assert in_flight == [1, 0, 0]
    assert layer.budget is not None and layer.budget.refused_calls == 1


def test_an_endpoint_that_never_says_429_costs_no_memory_per_call() -> None:
    """A served run's endpoint that never throttles stays in slow start for good: its limit
    must not keep a record of every call it ever granted (a server's memory grew by ~50
    bytes a call). 10,000 calls, 50 at a time under a ceiling of 50 and then of 1,000 (the
    limit stays below the ceiling, and no call waits), leave the memory where 1,000 left it."""

    async def calls(limit: EndpointLimit, count: int) -> None:
        async def call() -> None:
            async with limit.slot() as slot:
                await asyncio.sleep(0)
                slot.done(Outcome.ANSWERED)

        for _ in range(count // 50):
            await asyncio.gather(*(call() for _ in range(50)))

    async def grown(ceiling: int) -> int:
        limit = EndpointLimit("http://x", ceiling=ceiling)
        await calls(limit, 1000)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        await calls(limit, 10_000)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before

    tracemalloc.start()
    try:
        for ceiling in (50, 1000):
            growth = asyncio.run(grown(ceiling))
            assert growth < 20_000, f"ceiling {ceiling}: {growth} bytes kept by 10,000 calls"
    finally:
        tracemalloc.stop()
