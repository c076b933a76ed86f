"""osmo-run serve, measured in one process (not yet a workload of bench/run.py):

1. admission-to-result latency on an idle server, a no-op workflow: one rollout at a time,
   POST /rollout then a long-poll of its result over HTTP; p50 and p99;
2. throughput: N no-op rollouts at concurrency C through the server (an aiohttp client, at
   most 4 x C requests open, 429s backed off by Retry-After, each result long-polled),
   against the same rows through the runner alone (what osmo-run local runs).

    .venv/bin/python bench/serve_latency.py [--latency 500] [--rollouts 5000] [--concurrency 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from osmo_run.backends.local import LocalBackend
from osmo_run.run.executing.display import NullDisplay
from osmo_run.run.executing.runner import Runner, WorkItem
from osmo_run.run.reading.dataset import DatasetRow
from osmo_run.run.writing.output import OutputWriter
from osmo_run.sdk.config import AgentWorkflowConfig, ConcurrencyConfig
from osmo_run.sdk.types import ExecutionRequest
from osmo_run.serve.rollouts import ServeSettings
from osmo_run.serve.session import ServeOptions, ServeRun
from tests.workflows import NoopWorkflow

LEASE = "X-Osmosis-Rollout-Lease"


def _backend(concurrency: int, root: Path) -> LocalBackend:
    config = AgentWorkflowConfig(concurrency=ConcurrencyConfig(max_concurrent=concurrency))
    return LocalBackend(NoopWorkflow, config, None, artifacts_root=root / "artifacts")


def _body(rollout_id: str) -> dict[str, object]:
    return {
        "rollout_id": rollout_id,
        "initial_messages": [{"role": "user", "content": "hi"}],
        "chat_completions_url": "http://127.0.0.1:9/v1",
    }


async def _served(root: Path, concurrency: int, work: object) -> object:
    run = ServeRun(
        _backend(concurrency, root),
        root / "results.jsonl",
        ServeSettings(max_queued=4 * concurrency),
        ServeOptions(port=0),
        NullDisplay(),
    )
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run.serve(ready))
    url = await ready
    connector = aiohttp.TCPConnector(limit=4 * concurrency)
    try:
        async with aiohttp.ClientSession(url, connector=connector) as client:
            return await work(client)  # type: ignore[operator]
    finally:
        run.stop("bench over")
        await task


async def _one(client: aiohttp.ClientSession, rollout_id: str) -> None:
    while True:
        async with client.post("/rollout", json=_body(rollout_id)) as response:
            if response.status != 429:
                token = (await response.json())["polling_lease_token"]
                break
            wait = float(response.headers["Retry-After"])
        await asyncio.sleep(wait)
    while True:
        path = f"/rollout/{rollout_id}/result"
        async with client.get(path, headers={LEASE: token}) as response:
            answer = await response.json()
        if answer["status"] in ("success", "failure", "cancelled"):
            return


async def latency(count: int) -> list[float]:
    async def work(client: aiohttp.ClientSession) -> list[float]:
        seconds = []
        for index in range(count + 20):
            started = time.perf_counter()
            await _one(client, f"lat-{index}")
            if index >= 20:  # warm-up left out
                seconds.append(time.perf_counter() - started)
        return seconds

    with tempfile.TemporaryDirectory() as root:
        return await _served(Path(root), 4, work)  # type: ignore[return-value]


async def served_wall(rollouts: int, concurrency: int) -> float:
    async def work(client: aiohttp.ClientSession) -> float:
        open_requests = asyncio.Semaphore(4 * concurrency)

        async def bounded(index: int) -> None:
            async with open_requests:
                await _one(client, f"tp-{index}")

        started = time.perf_counter()
        await asyncio.gather(*(bounded(i) for i in range(rollouts)))
        return time.perf_counter() - started

    with tempfile.TemporaryDirectory() as root:
        return await _served(Path(root), concurrency, work)  # type: ignore[return-value]


async def local_wall(rollouts: int, concurrency: int) -> float:
    with tempfile.TemporaryDirectory() as root:
        backend = _backend(concurrency, Path(root))
        with OutputWriter(Path(root) / "results.jsonl") as writer:
            runner = Runner(backend, writer, NullDisplay())
            items = (
                WorkItem(
                    DatasetRow(i, i, f"r{i}", request := ExecutionRequest(f"r{i}", [])), 0, request
                )
                for i in range(rollouts)
            )
            started = time.perf_counter()
            await runner.run(items)
            wall = time.perf_counter() - started
        await backend.aclose()
        return wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=int, default=500)
    parser.add_argument("--rollouts", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    seconds = sorted(asyncio.run(latency(args.latency)))
    p50 = statistics.median(seconds) * 1000
    p99 = seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))] * 1000
    print(f"admission-to-result, idle, no-op: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(seconds)})")
    served = asyncio.run(served_wall(args.rollouts, args.concurrency))
    local = asyncio.run(local_wall(args.rollouts, args.concurrency))
    print(
        f"{args.rollouts} no-op rollouts at concurrency {args.concurrency}: served "
        f"{served:.2f}s ({args.rollouts / served:,.0f}/s), runner alone {local:.2f}s "
        f"({args.rollouts / local:,.0f}/s), ratio {served / local:.1f}x"
    )


if __name__ == "__main__":
    main()
