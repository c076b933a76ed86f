"""A trainer written against osmosis-ai 0.3.8's own client, unchanged: run by the osmosis
venv's Python (bench/setup.sh) against a server URL; prints one JSON object of what it saw.

It submits ``--rollouts`` rollouts at once (more than the server admits, so the client
backs off on 429 and retries), long-polls each to its end, then submits one slow rollout
and cancels it with ``cancel_rollout``. Nothing here knows it talks to osmo-run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import httpx
from osmosis_ai.rollout.client import RolloutClient


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--rollouts", type=int, default=12)
    parser.add_argument("--api-key")
    args = parser.parse_args()
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=60) as http:
        client = RolloutClient(
            url=args.url, http_client=http, admission_timeout_sec=60, api_key=args.api_key
        )
        health = await client.health()

        async def one(index: int) -> dict[str, object]:
            handle = await client.run_rollout_async(
                initial_messages=[{"role": "user", "content": f"say {index}"}],
                chat_completions_url="http://127.0.0.1:9/v1",
                rollout_id=f"step1-{index}",
                label=f"say {index}",
                metadata={"sleep": 0.2},
            )
            result = await handle.wait_for_completion()
            return result.model_dump(mode="json")

        results = await asyncio.gather(*(one(i) for i in range(args.rollouts)))
        slow = await client.run_rollout_async(
            initial_messages=[{"role": "user", "content": "slow"}],
            chat_completions_url="http://127.0.0.1:9/v1",
            rollout_id="slow-1",
            label="slow",
            metadata={"sleep": 30},
        )
        await asyncio.sleep(0.5)
        cancelled = await client.cancel_rollout("slow-1")
        slow_result = await slow.wait_for_completion()
    print(
        json.dumps(
            {
                "health": health,
                "results": results,
                "cancel": cancelled.model_dump(mode="json"),
                "slow": slow_result.model_dump(mode="json"),
                "seconds": time.monotonic() - started,
            }
        )
    )


asyncio.run(main())
