"""The trainer side of the serve family: one process that drives a rollout server through a
client and prints one JSON object of what it saw.

    python serve_driver.py throughput URL --client osmo|osmosis --rollouts N
        --concurrency C --model-url U [--server-pid PID] [--rss-after K]
    python serve_driver.py latency URL --client osmo|osmosis --rollouts N [--warmup 20]

``throughput`` keeps ``C`` rollouts in flight (C workers, each submitting its next rollout
as soon as the last one's result is in) until N are done; with ``--server-pid`` it reads
the server's VmRSS from /proc after K and after N results. ``latency`` submits one rollout
at a time and times each from the submission to its result (the first ``--warmup`` left
out). ``--client osmo`` is ``osmo_run.client.ServeClient`` (run with osmo-run's Python;
its batch routes where the server has them), ``--client osmo-single`` the same with
``batch=False`` (one request per submission and per result read, as before them);
``--client osmosis`` is osmosis-ai 0.3.8's ``RolloutClient`` (run in bench/.venvs/osmosis).
Every rollout carries the label "4" (the stub model's answer), so a graded success has
reward 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

Outcome = tuple[str, float | None]  # (status, reward)
RunOne = Callable[[int], Awaitable[Outcome]]


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (KiB) of process ``pid``."""
    text = Path(f"/proc/{pid}/status").read_text()
    return {
        key: int(match.group(1))
        for key in ("VmRSS", "VmHWM")
        if (match := re.search(rf"{key}:\s+(\d+) kB", text))
    }


def lift_open_files_limit() -> None:
    """Raise the soft limit on open files to the hard one: 1,000 rollouts in flight hold
    over 1,000 connections, more than a common soft limit of 1,024 allows."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _messages(index: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"What is 2 + 2? ({index})"}]


async def _with_osmo(url: str, model_url: str, open_max: int, work: Any, batch: bool = True) -> Any:
    from osmo_run.client import Rollout, ServeClient

    async with ServeClient(url, max_open=open_max, batch=batch) as client:

        async def one(index: int) -> Outcome:
            result = await client.run(Rollout(f"b-{index}", _messages(index), model_url, label="4"))
            return result.status, result.reward

        return await work(one)


async def _with_osmo_single(url: str, model_url: str, open_max: int, work: Any) -> Any:
    return await _with_osmo(url, model_url, open_max, work, batch=False)


CLIENTS = {"osmo": _with_osmo, "osmo-single": _with_osmo_single}


async def _with_osmosis(url: str, model_url: str, open_max: int, work: Any) -> Any:
    import httpx
    from osmosis_ai.rollout.client import RolloutClient

    limits = httpx.Limits(max_connections=open_max, max_keepalive_connections=open_max)
    # osmosis's default client: a 5 s timeout and 100 connections, too few for 1,000 in
    # flight (its docs tell a trainer to pass its own); results long-poll up to 30 s.
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        client = RolloutClient(url=url, http_client=http)

        async def one(index: int) -> Outcome:
            handle = await client.run_rollout_async(
                initial_messages=_messages(index),
                chat_completions_url=model_url,
                rollout_id=f"b-{index}",
                label="4",
            )
            result = await handle.wait_for_completion()
            reward = result.sample.reward if result.sample is not None else None
            return str(getattr(result.status, "value", result.status)), reward

        return await work(one)


async def throughput(args: argparse.Namespace) -> dict[str, Any]:
    rss: dict[str, dict[str, int]] = {}
    statuses: Counter[str] = Counter()
    wrong_rewards = 0

    async def work(one: RunOne) -> float:
        nonlocal wrong_rewards
        indices = iter(range(args.rollouts))
        done = 0

        async def worker() -> None:
            nonlocal done, wrong_rewards
            for index in indices:  # shared: each worker takes the next rollout
                status, reward = await one(index)
                statuses[status] += 1
                wrong_rewards += status == "success" and reward != 1.0
                done += 1
                if args.server_pid and done == args.rss_after:
                    rss["after_k"] = memory_kb(args.server_pid)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        return time.perf_counter() - started

    client = CLIENTS.get(args.client, _with_osmosis)
    wall = await client(args.url, args.model_url, 2 * args.concurrency + 16, work)
    if args.server_pid:
        rss["after_n"] = memory_kb(args.server_pid)
    return {
        "wall": wall,
        "statuses": dict(statuses),
        "wrong_rewards": wrong_rewards,
        "rss_kb": rss,
    }


async def latency(args: argparse.Namespace) -> dict[str, Any]:
    statuses: Counter[str] = Counter()

    async def work(one: RunOne) -> list[float]:
        seconds = []
        for index in range(args.warmup + args.rollouts):
            started = time.perf_counter()
            status, _ = await one(index)
            elapsed = time.perf_counter() - started
            statuses[status] += 1
            if index >= args.warmup:
                seconds.append(elapsed)
        return seconds

    client = CLIENTS.get(args.client, _with_osmosis)
    seconds = await client(args.url, args.model_url, 16, work)
    return {"seconds": seconds, "statuses": dict(statuses)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("throughput", "latency"))
    parser.add_argument("url")
    parser.add_argument("--client", choices=("osmo", "osmo-single", "osmosis"), required=True)
    parser.add_argument("--rollouts", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--model-url", default="http://127.0.0.1:9/v1")
    parser.add_argument("--server-pid", type=int, default=0)
    parser.add_argument("--rss-after", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    lift_open_files_limit()
    work = throughput if args.mode == "throughput" else latency
    print(json.dumps(asyncio.run(work(args))))


if __name__ == "__main__":
    main()
