"""--profile: where osmo-run's time and memory go (py-spy, tracemalloc, an RSS timeline)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections import Counter
from pathlib import Path

from harness import BIN, MB, OUT, Options, checked, dataset, osmo_local, run, step


def _fold(raw: Path, top: int = 12) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """Self and inclusive shares of py-spy's raw (folded) stacks; osmo_run frames only for
    the inclusive list."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, n_text = line.rpartition(" ")
        n = int(n_text)
        total += n
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    if not total:
        return [], []
    osmo = [
        (n, f)
        for f, n in incl.most_common()
        if "osmo_run" in f
        or "/run/" in f
        or f.endswith(
            (
                "(session.py)",
                "(runner.py)",
                "(dataset.py)",
                "(output.py)",
                "(records.py)",
                "(summary.py)",
                "(display.py)",
            )
        )
    ]
    # Frames on (nearly) every stack (main, execute_run, ...) say nothing; start below them.
    osmo = [(n, f) for n, f in osmo if n < 0.8 * total]
    return (
        [(100 * n / total, f) for f, n in own.most_common(top)],
        [(100 * n / total, f) for n, f in osmo[:top]],
    )


def _pyspy(name: str, cmd: list[str], opts: Options) -> None:
    spy = BIN / "py-spy"
    if not spy.exists():
        opts.report.text(f"profile {name}: skipped (`.venv/bin/pip install py-spy` to enable)")
        return
    raw = OUT / "profiles" / f"{name}.folded.txt"
    raw.parent.mkdir(parents=True, exist_ok=True)
    step(f"profile: py-spy on {name}")
    checked(run([spy, "record", "--rate", "250", "--format", "raw", "--output", raw, "--", *cmd]))
    own, incl = _fold(raw)
    lines = [
        f"#### py-spy: {name} (`{shlex.join(cmd[1:3])} ...`), % of samples",
        "",
        "| self % | function | | incl. % | osmo-run function |",
        "|---|---|---|---|---|",
    ]
    for i in range(max(len(own), len(incl))):
        a = own[i] if i < len(own) else (0.0, "")
        b = incl[i] if i < len(incl) else (0.0, "")
        lines.append(f"| {a[0]:.1f} | {a[1]} | | {b[0]:.1f} | {b[1]} |")
    opts.report.text("\n".join(lines))


TRACE_VALIDATE = """
import json, sys, tracemalloc
from pathlib import Path
from osmo_run.run.reading.dataset import Dataset
tracemalloc.start()
Dataset(Path(sys.argv[1])).validate(stop_on_error=True)
validate_mb = tracemalloc.get_traced_memory()[1] / 2**20
build_mb = None
try:  # the run's summary: one duration per row, sorted at the end for percentiles
    from osmo_run.run.reporting.summary import SummaryBuilder
    builder = SummaryBuilder()
    for i in range(int(sys.argv[2])):
        builder.add_values("success", None, 1.0, None, 0.001 * (i % 97))
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    builder.build()
    build_mb = (tracemalloc.get_traced_memory()[1] - before) / 2**20
except Exception:
    pass
print(json.dumps({"peak_mb": validate_mb, "build_mb": build_mb}))
"""


def profiles(opts: Options) -> None:
    opts.report.text("## Profiles (`--profile`)")
    rows = 20_000 if opts.quick else 100_000
    _pyspy("throughput", osmo_local(dataset(rows), OUT / "profiles" / "t" / "results.jsonl"), opts)
    _pyspy(
        "latency",
        osmo_local(
            dataset(20_000),
            OUT / "profiles" / "l" / "results.jsonl",
            workflow="SleepWorkflow",
            concurrency=1000,
        ),
        opts,
    )
    big = 100_000 if opts.quick else 1_000_000
    step(f"profile: memory at {big} rows (RSS timeline; ids vs no ids; tracemalloc)")
    p = checked(
        run(osmo_local(dataset(big), OUT / "profiles" / "m" / "results.jsonl"), sample_rss=True)
    )
    q = checked(run(osmo_local(dataset(big, ids=False), OUT / "profiles" / "n" / "results.jsonl")))
    traced = json.loads(
        checked(run([sys.executable, "-P", "-c", TRACE_VALIDATE, dataset(big), str(big)]))
        .stdout.strip()
        .splitlines()[-1]
    )
    timeline = p.rss_timeline
    marks = [timeline[int(i * (len(timeline) - 1) / 8)] for i in range(9)] if timeline else []
    top_t, top_kb = max(timeline, key=lambda item: item[1]) if timeline else (0.0, 0)
    opts.report.text(
        f"#### memory at {big:,} rows\n\n"
        f"- RSS timeline of `osmo-run local` (s: MiB): "
        + ", ".join(f"{t:.0f}: {kb / MB:.0f}" for t, kb in marks)
        + f"; highest sample {top_kb / MB:.0f} MiB at {top_t:.1f} s of {p.wall:.0f} s; "
        f"peak (/usr/bin/time) {p.rss_mb:.0f} MiB.\n"
        f"- Same rows without an `id` column (line numbers name them): peak {q.rss_mb:.0f} MiB.\n"
        f"- tracemalloc peak of `Dataset.validate()` alone over the rows with ids: "
        f"{traced['peak_mb']:.0f} MiB; of `SummaryBuilder.build()` over {big:,} durations "
        "(the end of the run): "
        + ("n/a" if traced["build_mb"] is None else f"+{traced['build_mb']:.0f} MiB")
        + "."
    )
