"""What running a grader's unbounded work in a grader worker process costs per row
(issue 27 item 1): each such built-in grader's pure function called in this process versus
through :data:`osmo_run.graders.workers.GRADER_WORKERS` (a warm worker, reused), and the
one-off costs: the first call of a run (the zygote starts and loads the grader's library)
and a replacement after a worker is killed at a deadline (a fork of the zygote).

    .venv/bin/python bench/grader_workers.py [--calls 300]

Prints a Markdown table (bench/RESULTS.md keeps the last one). A report: nothing asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from osmo_run.graders import json_data, math_equivalence, text
from osmo_run.graders.workers import GRADER_WORKERS

Case = tuple[str, Callable[..., Any], tuple[Any, ...], Callable[[], object] | None]

CASES: list[Case] = [
    (
        "MathEquivalence (math-verify)",
        math_equivalence._verify,
        ("$\\frac{1}{2}$", "so $\\boxed{0.5}$", math_equivalence.MathEquivalenceSettings()),
        math_equivalence._warm,
    ),
    (
        "RegexMatch",
        text.regex_search,
        (
            text.RegexMatchSettings(pattern=r"ANSWER:\s*([A-D])"),
            "Reasoning... " * 20 + "ANSWER: C",
        ),
        None,
    ),
    (
        "JsonSchema (jsonschema)",
        json_data.schema_failures,
        (
            {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name", "age"],
            },
            {"name": "Ada", "age": 36},
        ),
        json_data._jsonschema,
    ),
]


def _per_call(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e6


async def _measure(case: Case, calls: int) -> dict[str, float]:
    _, function, args, warm = case
    first_started = time.perf_counter()
    await GRADER_WORKERS.run(function, *args, warm=warm)
    first = time.perf_counter() - first_started
    function(*args)  # in-process: loaded and warm too
    inline, hop = [], []
    for _ in range(calls):
        started = time.perf_counter()
        function(*args)
        inline.append(time.perf_counter() - started)
        started = time.perf_counter()
        await GRADER_WORKERS.run(function, *args, warm=warm)
        hop.append(time.perf_counter() - started)
    with_kill = []
    for _ in range(5):  # a call given up at its deadline, then the next one on a new worker
        try:
            await asyncio.wait_for(GRADER_WORKERS.run(time.sleep, 60), 0.05)
        except TimeoutError:
            pass
        started = time.perf_counter()
        await GRADER_WORKERS.run(function, *args, warm=warm)
        with_kill.append(time.perf_counter() - started)
    return {
        "inline_us": _per_call(inline),
        "hop_us": _per_call(hop),
        "first_ms": first * 1e3,
        "replaced_ms": statistics.median(with_kill) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    options = parser.parse_args()
    print(
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {options.calls} calls "
        f"each, medians; load average {os.getloadavg()[0]:.1f} at the start\n"
    )
    print(
        "| grader | in this process, µs/row | in a worker, µs/row | worker hop, µs/row "
        "| first call of a run, ms | after a kill, ms |"
    )
    print("|---|---|---|---|---|---|")
    for case in CASES:
        got = asyncio.run(_measure(case, options.calls))
        print(
            f"| {case[0]} | {got['inline_us']:,.0f} | {got['hop_us']:,.0f} | "
            f"+{got['hop_us'] - got['inline_us']:,.0f} | {got['first_ms']:,.0f} | "
            f"{got['replaced_ms']:,.0f} |"
        )
    GRADER_WORKERS.kill_all()


if __name__ == "__main__":
    main()
