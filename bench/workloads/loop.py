"""The hand-written driver loop of workload 1 (and the floor of workload 3).

    python loop.py floor   DATASET OUTPUT -c N [--sleep SEC]
    python loop.py osmosis DATASET OUTPUT -c N      (bench/.venvs/osmosis only)

Reads the JSONL line by line, keeps at most N rows in flight (a semaphore around
create_task), and writes one JSON line per finished row, flushed at once, as osmo-run
does. ``floor`` awaits a no-op coroutine per row (or ``asyncio.sleep(SEC)``): the least
any runner can do. ``osmosis`` runs each row through osmosis-ai 0.3.8's LocalBackend with
the same no-op workflow and exact-match grader as the osmo-run run, and osmo-run's default
deadlines (600 s workflow, 120 s grader). Prints {"rows": n, "loop_sec": s} at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

RowFn = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


async def _noop() -> None:
    return None


def floor_row(sleep_sec: float) -> RowFn:
    async def run(obj: dict[str, Any]) -> dict[str, Any]:
        if sleep_sec:
            await asyncio.sleep(sleep_sec)
        else:
            await _noop()
        return {
            "row_id": obj["id"],
            "status": "success",
            "sample": {"messages": [{"role": "assistant", "content": "4"}]},
        }

    return run


def osmosis_row(concurrency: int) -> RowFn:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from osmosis_ai.rollout.backend import LocalBackend
    from osmosis_ai.rollout.types import (
        AgentWorkflowConfig,
        ConcurrencyConfig,
        ExecutionRequest,
    )
    from osmosis_workloads import ExactMatchGrader, NoopWorkflow

    backend = LocalBackend(
        workflow=NoopWorkflow,
        workflow_config=AgentWorkflowConfig(
            name="bench-noop", concurrency=ConcurrencyConfig(max_concurrent=concurrency)
        ),
        grader=ExactMatchGrader,
    )

    async def run(obj: dict[str, Any]) -> dict[str, Any]:
        prompt = [{"role": "user", "content": obj["user_prompt"]}]
        request = ExecutionRequest(
            id=obj["id"],
            prompt=prompt,
            label=obj.get("ground_truth"),
            metadata=obj.get("metadata"),
            agent_timeout_sec=600.0,
            grader_timeout_sec=120.0,
        )
        result = (await backend.execute(request)).result
        sample = result.sample
        return {
            "row_id": obj["id"],
            "status": result.status.value,
            "reward": None if sample is None else sample.reward,
            "error_category": None if result.err_category is None else result.err_category.value,
            "error_message": result.err_message,
            "sample": None if sample is None else sample.model_dump(mode="json"),
        }

    return run


async def drive(dataset: Path, output: Path, concurrency: int, run_row: RowFn) -> int:
    slots = asyncio.Semaphore(concurrency)
    tasks: set[asyncio.Task[None]] = set()
    rows = 0
    # Blocking reads and flushed writes on the loop's thread, as osmo-run does.
    with open(dataset, "rb") as source, open(output, "w", encoding="utf-8") as out:  # noqa: ASYNC230

        async def one(obj: dict[str, Any]) -> None:
            try:
                record = await run_row(obj)
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                out.flush()
            finally:
                slots.release()

        for raw in source:
            if not raw.strip():
                continue
            obj = json.loads(raw)
            await slots.acquire()
            task = asyncio.create_task(one(obj))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            rows += 1
        if tasks:
            await asyncio.gather(*tasks)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["floor", "osmosis"])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("-c", "--concurrency", type=int, default=100)
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args()
    if args.kind == "floor":
        run_row = floor_row(args.sleep)
    else:
        os.environ.setdefault(
            "_OSMOSIS_ROLLOUT_ARTIFACT_ROOT", str(args.output.parent / "artifacts")
        )
        run_row = osmosis_row(args.concurrency)
    started = time.perf_counter()
    rows = asyncio.run(drive(args.dataset, args.output, args.concurrency, run_row))
    print(json.dumps({"rows": rows, "loop_sec": time.perf_counter() - started}))


if __name__ == "__main__":
    main()
