"""Adaptive concurrency against a rate-limited endpoint (issue 24, "Measured"): the real
``osmo-run local`` at concurrency 200 against a stub that answers at most 40 calls at once
and HTTP 429 above (``tests/llm/slot_stub.py``, in this process; the run in its own), with
the adaptive limit (the default), a fixed limit of exactly 40 (the best a user could have
set by hand) and a fixed 200 (no limit below the concurrency: the storm).

    .venv/bin/python bench/model_limits.py [--rows 5000] [--delay 0.1] [--repeat 1]

Prints a Markdown table: wall time of the run (process start to exit), 429s, their share
of the calls, and the adaptive run's wall time over the hand-tuned one's. Targets: within
1.25x of fixed 40, under 5 % of calls answered 429. A report: nothing asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.llm.slot_stub import SlotStub, serve_slots  # noqa: E402

OSMO_RUN = Path(sys.executable).with_name("osmo-run")


def _run(
    work: Path, rows: int, concurrency: int, slots: int, delay: float, fixed: int | None
) -> dict[str, Any]:
    data = work / "data.jsonl"
    if not data.exists():
        lines = (json.dumps({"id": f"r{i:05d}", "prompt": "hello"}) for i in range(rows))
        data.write_text("\n".join(lines) + "\n")
    with serve_slots(SlotStub(slots=slots, delay_sec=delay)) as stub:
        llm: dict[str, Any] = {"base_url": stub.base_url, "model": "stub-model"}
        if fixed is not None:
            llm["max_concurrency"] = fixed
        spec = work / "spec.yaml"
        spec.write_text(
            "workflow: tests.llm.llm_workflows:EndpointWorkflow\n"
            f"code_dir: {json.dumps(str(REPO))}\n"
            f"concurrency: {concurrency}\n"
            "timeouts: {agent_sec: 600}\n"
            "breaker: off\n"
            f"llm: {json.dumps(llm)}\n"
        )
        output = work / "out" / "results.jsonl"
        env = {**os.environ, "PYTHONPATH": str(REPO), "NO_PROXY": "127.0.0.1"}
        started = time.monotonic()
        command = [str(OSMO_RUN), "local", str(data), "--spec", str(spec), "-o", str(output)]
        proc = subprocess.run(
            [*command, "--overwrite", "--display", "none"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - started
        calls, throttled, answered, peak = stub.calls, stub.throttled, stub.answered, stub.peak
    summary = json.loads(output.with_name("results.summary.json").read_text())
    (limit,) = summary["model_limits"]
    return {
        "code": proc.returncode,
        "wall": wall,
        "calls": calls,
        "throttled": throttled,
        "answered": answered,
        "peak": peak,
        "ok": summary["by_status"].get("success", 0),
        "min": limit["min"],
        "final": limit["final"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--slots", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.1, help="seconds per answer")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    modes: list[tuple[str, int | None]] = [
        (f"fixed {args.slots} (hand-tuned)", args.slots),
        ("adaptive (default)", None),
        (f"fixed {args.concurrency}", args.concurrency),
    ]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for name, fixed in modes:
                work = Path(tmp)
                results[name].append(
                    _run(work, args.rows, args.concurrency, args.slots, args.delay, fixed)
                )
    tuned = statistics.median(r["wall"] for r in results[modes[0][0]])
    print(
        f"{args.rows:,} rows, concurrency {args.concurrency}, stub of {args.slots} slots "
        f"answering in {args.delay:g}s; {platform.python_version()}, {os.cpu_count()} cores, "
        f"median of {args.repeat}\n"
    )
    print("| limit | wall s | vs fixed 40 | 429s | 429s / calls | rows ok | min / final |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, _ in modes:
        runs = results[name]
        wall = statistics.median(r["wall"] for r in runs)
        throttled = statistics.median(r["throttled"] for r in runs)
        calls = statistics.median(r["calls"] for r in runs)
        ok = min(r["ok"] for r in runs)
        last = runs[-1]
        print(
            f"| {name} | {wall:.1f} | {wall / tuned:.2f}x | {throttled:,.0f} | "
            f"{throttled / calls:.1%} | {ok:,} | {last['min']} / {last['final']} |"
        )


if __name__ == "__main__":
    main()
