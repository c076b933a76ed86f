"""The floors of the LLM-bound workloads: the same model calls with no runner around them.

    python llm_floor.py chat     DATASET OUTPUT -c N --url BASE_URL
    python llm_floor.py agents   DATASET OUTPUT -c N --url BASE_URL [--tool-turns K]
    python llm_floor.py strands  DATASET OUTPUT -c N --url BASE_URL
    python llm_floor.py embedded DATASET OUTPUT -c N [--max-tokens T]

The driver loop is loop.py's (a semaphore around create_task, one flushed JSON line per
row). ``chat`` posts each row with one shared ``aiohttp`` session; ``agents`` runs each row
through the bare OpenAI Agents SDK, ``strands`` through bare Strands, both on one shared
``AsyncOpenAI`` with openai's ``DefaultAioHttpClient`` (defaults otherwise); ``embedded``
starts the embedded model server itself (as osmo-run would for ``llm: embedded`` at this
concurrency) and drives it with ``aiohttp`` at parallelism N. Prints
``{"rows", "loop_sec", "calls", "completion_tokens", "span_sec"}`` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop import drive

RowFn = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
MODEL = "bench-model"
COUNTS = {"calls": 0, "completion_tokens": 0, "first": float("inf"), "last": 0.0}


def _prompt(obj: dict[str, Any]) -> list[dict[str, str]]:
    return [{"role": "user", "content": obj["user_prompt"]}]


def chat_row(url: str, concurrency: int, body_extra: dict[str, Any]) -> tuple[RowFn, Any]:
    import aiohttp

    state: dict[str, Any] = {}
    endpoint = url.rstrip("/") + "/chat/completions"

    async def run(obj: dict[str, Any]) -> dict[str, Any]:
        session = state.get("session")
        if session is None:
            connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
            session = state["session"] = aiohttp.ClientSession(connector=connector)
        body = {"model": MODEL, "messages": _prompt(obj), **body_extra}
        started = time.time()
        async with session.post(endpoint, json=body) as response:
            data = await response.json(content_type=None)
        COUNTS["first"] = min(COUNTS["first"], started)
        COUNTS["last"] = max(COUNTS["last"], time.time())
        COUNTS["calls"] += 1
        COUNTS["completion_tokens"] += data["usage"]["completion_tokens"]
        message = data["choices"][0]["message"]
        return {"row_id": obj["id"], "status": "success", "reply": message.get("content")}

    async def close() -> None:
        if "session" in state:
            await state["session"].close()

    return run, close


def _shared_openai(url: str) -> Any:
    from openai import AsyncOpenAI, DefaultAioHttpClient

    return AsyncOpenAI(base_url=url, api_key="bench", http_client=DefaultAioHttpClient())


def agents_row(url: str, tool_turns: int) -> tuple[RowFn, Any]:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    state: dict[str, Any] = {}

    @function_tool
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    async def run(obj: dict[str, Any]) -> dict[str, Any]:
        client = state.get("client") or state.setdefault("client", _shared_openai(url))
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        agent = Agent(
            name="assistant",
            instructions="Answer.",
            model=model,
            tools=[add] if tool_turns else [],
        )
        result = await Runner.run(agent, _prompt(obj), max_turns=tool_turns + 2)
        COUNTS["calls"] += len(result.raw_responses)
        return {"row_id": obj["id"], "status": "success", "reply": result.final_output}

    async def close() -> None:
        if "client" in state:
            await state["client"].close()

    return run, close


def strands_row(url: str, tool_turns: int) -> tuple[RowFn, Any]:
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    state: dict[str, Any] = {}

    @tool
    def add(a: float, b: float) -> float:
        """Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        return a + b

    async def run(obj: dict[str, Any]) -> dict[str, Any]:
        client = state.get("client") or state.setdefault("client", _shared_openai(url))
        model = OpenAIModel(client=client, model_id=MODEL, params={})
        agent = Agent(
            model=model,
            messages=[{"role": "user", "content": [{"text": obj["user_prompt"]}]}],
            tools=[add] if tool_turns else [],
            callback_handler=None,
        )
        result = await agent.invoke_async()
        COUNTS["calls"] += result.metrics.cycle_count
        return {"row_id": obj["id"], "status": "success", "reply": str(result)}

    async def close() -> None:
        if "client" in state:
            await state["client"].close()

    return run, close


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["chat", "agents", "strands", "embedded"])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("-c", "--concurrency", type=int, default=100)
    parser.add_argument("--url", default="")
    parser.add_argument("--tool-turns", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    server = None
    if args.kind == "chat":
        run_row, close = chat_row(args.url, args.concurrency, {"max_tokens": 4})
    elif args.kind == "agents":
        run_row, close = agents_row(args.url, args.tool_turns)
    elif args.kind == "strands":
        run_row, close = strands_row(args.url, args.tool_turns)
    else:
        from osmo_run.llm.embedded import EmbeddedLLMServer, server_shape

        parallel, context = server_shape(args.concurrency)
        server = EmbeddedLLMServer(parallel=parallel, context_tokens=context)
        endpoint = server.start()
        body = {"max_tokens": args.max_tokens, "temperature": 0.0}
        run_row, close = chat_row(endpoint.base_url, args.concurrency, body)

    async def main_loop() -> int:
        try:
            return await drive(args.dataset, args.output, args.concurrency, run_row)
        finally:
            await close()

    started = time.perf_counter()
    try:
        rows = asyncio.run(main_loop())
    finally:
        if server is not None:
            server.stop()
    loop_sec = time.perf_counter() - started
    span = COUNTS["last"] - COUNTS["first"] if COUNTS["last"] else 0.0
    result = {
        "rows": rows,
        "loop_sec": loop_sec,
        "calls": COUNTS["calls"],
        "completion_tokens": COUNTS["completion_tokens"],
        "span_sec": span,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
