"""osmo-run benchmarks (issue 6): one command reproduces every figure.

    .venv/bin/python bench/run.py [--quick] [--only NAME,...] [--profile]

Workloads (NAMEs): throughput, memory, latency, display, startup, harbor, view, the llm-*
family, serve. Every measurement
is a fresh subprocess; wall time is spawn-to-exit (interpreter start-up, imports, the
dataset validation pass and the summary included), peak RSS is the child's own
``ru_maxrss`` from ``os.wait4`` (see ``rss_method_check``). Prints a markdown table and
overwrites bench/RESULTS.md. ``--profile`` adds profiles (py-spy, tracemalloc, an RSS
timeline) of osmo-run for throughput, latency and memory under bench/out/profiles/.

The command and the table of workloads are here; harness.py measures, report.py writes the
report, and families/ holds one module per workload family (bench/README.md, "The code").

This is a report: no figure is asserted anywhere; a missed target is printed as missed.
Stdlib only (plus what the dev venv holds: osmo-run, harbor, and py-spy if installed).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from families.cli import w_display, w_startup
from families.harbor import w_harbor
from families.llm import (
    w_llm_agents,
    w_llm_capture,
    w_llm_chat,
    w_llm_embedded,
    w_llm_harbor,
    w_llm_tools,
)
from families.local import w_latency, w_memory, w_memory_formats, w_throughput
from families.profiles import profiles
from families.serve import w_serve
from families.view import w_view
from harness import (
    BENCH,
    OSMO_RUN,
    OUT,
    BenchError,
    Options,
    Report,
    rss_method_check,
    use_revision,
)
from report import write_results

NAMES = (
    "throughput",
    "memory",
    "memory-formats",
    "latency",
    "display",
    "startup",
    "harbor",
    "view",
    "llm-chat",
    "llm-capture",
    "llm-agents",
    "llm-tools",
    "llm-embedded",
    "llm-harbor",
    "serve",
)


WORKLOAD_FNS: dict[str, Callable[[Options], None]] = {
    "throughput": w_throughput,
    "memory": w_memory,
    "memory-formats": w_memory_formats,
    "latency": w_latency,
    "display": w_display,
    "startup": w_startup,
    "harbor": w_harbor,
    "view": w_view,
    "llm-chat": w_llm_chat,
    "llm-capture": w_llm_capture,
    "llm-agents": w_llm_agents,
    "llm-tools": w_llm_tools,
    "llm-embedded": w_llm_embedded,
    "llm-harbor": w_llm_harbor,
    "serve": w_serve,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="20k rows instead of 100k, one run each, no 1M-row memory run",
    )
    parser.add_argument("--only", default="", help=f"comma-separated subset of {','.join(NAMES)}")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile osmo-run (py-spy, tracemalloc, RSS timeline)",
    )
    parser.add_argument("--repeats", type=int, default=None, help="runs per timed figure")
    parser.add_argument(
        "--rows", type=int, default=None, help="rows of llm-capture (default: 5k quick, 20k)"
    )
    parser.add_argument(
        "--rev",
        default=None,
        help="measure osmo_run as committed at this git revision (e.g. HEAD) instead of the "
        "working tree",
    )
    parser.add_argument(
        "--serve-size",
        default=None,
        metavar="N,C",
        help="serve: N rollouts at concurrency C (default 20000,1000; --quick 5000,1000)",
    )
    parser.add_argument(
        "--results",
        default=str(BENCH / "RESULTS.md"),
        help="the Markdown report to (over)write [default: bench/RESULTS.md]",
    )
    args = parser.parse_args()
    serve_size = None
    if args.serve_size:
        try:
            rollouts, concurrency = (int(x) for x in args.serve_size.split(","))
        except ValueError:
            parser.error(f"--serve-size: expected N,C (two integers), got {args.serve_size!r}")
        if rollouts < 1 or concurrency < 1:
            parser.error("--serve-size: N and C must be at least 1")
        serve_size = (rollouts, concurrency)
    only = [n.strip() for n in args.only.split(",") if n.strip()] or list(NAMES)
    unknown = set(only) - set(NAMES)
    if unknown:
        parser.error(f"--only: unknown {sorted(unknown)}; choose from {', '.join(NAMES)}")
    if not OSMO_RUN.exists():
        parser.error(f"{OSMO_RUN} is missing: run with the dev venv's python (make example)")
    repeats = args.repeats or (1 if args.quick else 3)
    opts = Options(
        args.quick, args.profile, repeats, Report(), rows=args.rows, serve_size=serve_size
    )
    command = shlex.join([".venv/bin/python", "bench/run.py", *sys.argv[1:]])
    started_at = datetime.now(UTC)
    started = time.perf_counter()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.rev:
        use_revision(args.rev)
    rss_method_check(opts)
    failures = []
    for name in only:
        try:
            WORKLOAD_FNS[name](opts)
        except BenchError as exc:
            failures.append(name)
            opts.report.text(f"### {name}\n\nFAILED to measure: {exc}")
    if args.profile:
        try:
            profiles(opts)
        except BenchError as exc:
            opts.report.text(f"profiles FAILED: {exc}")
    text = write_results(opts, command, started_at, time.perf_counter() - started)
    results = Path(args.results)
    results.write_text(text, encoding="utf-8")
    verdict = {True: "met", False: "MISSED", None: "not measured"}
    print("\n## Targets\n")
    for t in opts.report.targets:
        print(f"  [{verdict[t.met]:>12}] {t.workload}. {t.what}: {t.measured} (target {t.target})")
    print(f"\nwrote {results}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
