"""Local rows with no model: throughput, memory (JSONL and the other formats) and latency,
against a bare loop and osmosis-ai."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from harness import (
    LOOP,
    OSMOSIS_PY,
    OUT,
    Options,
    Proc,
    best,
    check_loop_output,
    check_osmo_output,
    checked,
    dataset,
    fmt_rate,
    osmo_local,
    run,
    setup_osmosis,
    step,
)


def w_throughput(opts: Options) -> None:
    rows = 20_000 if opts.quick else 100_000
    concurrency = 100
    data = dataset(rows)
    base = OUT / "throughput"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    setup_osmosis()

    def floor() -> Proc:
        out = base / "floor.jsonl"
        p = checked(run([sys.executable, LOOP, "floor", data, out, "-c", str(concurrency)]))
        check_loop_output(out, rows)
        return p

    def osmosis() -> Proc:
        out = base / "osmosis" / "results.jsonl"
        shutil.rmtree(out.parent, ignore_errors=True)  # its per-row artifact directories
        out.parent.mkdir(parents=True)
        cmd: list[str | Path] = [OSMOSIS_PY, LOOP, "osmosis", data, out, "-c", str(concurrency)]
        p = checked(run(cmd))
        check_loop_output(out, rows, parse=True)
        return p

    def osmo() -> Proc:
        out = base / "osmo-run" / "results.jsonl"
        p = checked(run(osmo_local(data, out, concurrency=concurrency)))
        check_osmo_output(out, rows)
        return p

    runs: dict[str, list[Proc]] = {"floor": [], "osmosis": [], "osmo-run": []}
    for i in range(opts.repeats):
        for name, fn in (("floor", floor), ("osmosis", osmosis), ("osmo-run", osmo)):
            step(f"throughput: {name} {rows} rows, run {i + 1}/{opts.repeats}")
            runs[name].append(fn())
    labels = {
        "floor": "floor: bare asyncio loop, no-op coroutine",
        "osmosis": "osmosis-ai 0.3.8 LocalBackend (same loop)",
        "osmo-run": "`osmo-run local --display none`",
    }
    med = {k: best(v) for k, v in runs.items()}
    rate = {k: rows / p.wall for k, p in med.items()}
    table = []
    for k, p in med.items():
        loop = ""
        if p.stdout.strip().startswith("{"):
            loop_sec = json.loads(p.stdout.strip().splitlines()[-1])["loop_sec"]
            loop = fmt_rate(rows / loop_sec)
        walls = ", ".join(f"{q.wall:.2f}" for q in runs[k])
        table.append(
            [
                labels[k],
                f"{p.wall:.2f} ({walls})",
                fmt_rate(rate[k]),
                loop or "-",
                f"{p.cpu:.2f}",
                f"{max(q.rss_mb for q in runs[k]):.0f}",
            ]
        )
    opts.report.table(
        f"1. Local throughput: {rows:,} rows, no-op workflow + exact-match grader, "
        f"concurrency {concurrency} for all three, output JSONL flushed per row",
        ["run", "wall s, best (all)", "rows/s", "rows/s inside the loop", "CPU s", "peak RSS MiB"],
        table,
    )
    vs_floor = rate["floor"] / rate["osmo-run"]
    vs_osmosis = rate["osmo-run"] / rate["osmosis"]
    opts.report.text(
        f"osmo-run/floor: **{vs_floor:.1f}x slower** than the floor · "
        f"osmo-run/osmosis: **{vs_osmosis:.1f}x faster** than osmosis-ai"
    )
    opts.report.target(
        "1", "osmo-run rows/s", fmt_rate(rate["osmo-run"]), ">= 25,000", rate["osmo-run"] >= 25_000
    )
    opts.report.target(
        "1", "osmo-run vs osmosis-ai", f"{vs_osmosis:.1f}x faster", ">= 15x", vs_osmosis >= 15
    )
    opts.report.target(
        "1", "osmo-run vs floor", f"{vs_floor:.1f}x slower", "within 8x", vs_floor <= 8
    )


def w_memory(opts: Options) -> None:
    sizes = [10_000, 100_000] + ([] if opts.quick else [1_000_000])
    base = OUT / "memory"
    shutil.rmtree(base, ignore_errors=True)
    table = []
    peaks: dict[int, float] = {}
    for rows in sizes:
        data = dataset(rows)
        out = base / f"{rows}" / "results.jsonl"
        step(f"memory: osmo-run local, {rows} rows")
        p = checked(run(osmo_local(data, out)))
        check_osmo_output(out, rows)
        peaks[rows] = p.rss_mb
        table.append(
            [
                f"{rows:,}",
                f"{p.wall:.2f}",
                fmt_rate(rows / p.wall),
                f"{p.cpu:.2f}",
                f"{p.rss_mb:.1f}",
                f"{p.rss_mb / peaks[sizes[0]]:.2f}x",
            ]
        )
    opts.report.table(
        "2. Memory: peak RSS of `osmo-run local` (no-op rows with an `id`, concurrency 100)",
        ["rows", "wall s", "rows/s", "CPU s", "peak RSS MiB", "vs 10k rows"],
        table,
    )
    largest = sizes[-1]
    growth = peaks[largest] / peaks[sizes[0]]
    opts.report.target(
        "2",
        f"peak RSS at {largest:,} rows",
        f"{peaks[largest]:.0f} MiB",
        "< 150 MiB at 1M rows" if largest == 1_000_000 else "(1M skipped)",
        peaks[largest] < 150 if largest == 1_000_000 else None,
    )
    opts.report.target(
        "2",
        f"RSS growth 10k -> {largest:,} rows",
        f"{growth:.2f}x",
        "flat (<= 1.25x)",
        growth <= 1.25,
    )


def dataset_as(rows: int, fmt: str) -> Path:
    """:func:`dataset`'s rows as CSV or Parquet (row groups of 100,000 rows, as Hugging
    Face writes them), generated once into bench/out/data."""
    source = dataset(rows)
    path = source.with_suffix(f".{fmt}")
    if path.exists():
        return path
    tmp = path.with_name(path.name + ".tmp")
    if fmt == "csv":
        with open(source, encoding="utf-8") as src, open(tmp, "w", newline="") as handle:
            out = csv.writer(handle)
            out.writerow(["id", "user_prompt", "ground_truth"])
            for line in src:
                row = json.loads(line)
                out.writerow([row["id"], row["user_prompt"], row["ground_truth"]])
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([(n, pa.string()) for n in ("id", "user_prompt", "ground_truth")])
        with open(source, encoding="utf-8") as src, pq.ParquetWriter(tmp, schema) as writer:
            chunk: list[dict[str, Any]] = []
            for line in src:
                chunk.append(json.loads(line))
                if len(chunk) == 100_000:
                    writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
                    chunk = []
            if chunk:
                writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
    tmp.rename(path)
    return path


def w_memory_formats(opts: Options) -> None:
    """Peak RSS of the same rows as JSONL, CSV and Parquet: the readers stream alike."""
    rows = 100_000 if opts.quick else 1_000_000
    base = OUT / "memory-formats"
    shutil.rmtree(base, ignore_errors=True)
    table = []
    peaks: dict[str, float] = {}
    for fmt in ("jsonl", "csv", "parquet"):
        data = dataset(rows) if fmt == "jsonl" else dataset_as(rows, fmt)
        out = base / fmt / "results.jsonl"
        step(f"memory-formats: osmo-run local, {rows} rows of {fmt}")
        p = checked(run(osmo_local(data, out)))
        check_osmo_output(out, rows)
        peaks[fmt] = p.rss_mb
        size = data.stat().st_size / (1 << 20)
        table.append(
            [fmt, f"{size:.0f}", f"{p.wall:.2f}", fmt_rate(rows / p.wall), f"{p.rss_mb:.1f}"]
        )
    opts.report.table(
        f"2b. Memory by dataset format: peak RSS of `osmo-run local`, {rows:,} no-op rows "
        "with an `id` (concurrency 100)",
        ["format", "file MiB", "wall s", "rows/s", "peak RSS MiB"],
        table,
    )
    for fmt in ("csv", "parquet"):
        opts.report.target(
            "2b",
            f"{fmt} peak RSS at {rows:,} rows",
            f"{peaks[fmt]:.0f} MiB",
            "< 150 MiB at 1M rows" if rows == 1_000_000 else "(1M skipped)",
            peaks[fmt] < 150 if rows == 1_000_000 else None,
        )


def _span(out: Path) -> tuple[float, float]:
    """(first workflow start, last workflow end) as time.time() from SleepWorkflow metrics."""
    first, last = float("inf"), 0.0
    with open(out, encoding="utf-8") as handle:
        for line in handle:
            metrics = json.loads(line)["sample"]["metrics"]
            first = min(first, metrics["t_start"])
            last = max(last, metrics["t_end"])
    return first, last


def w_latency(opts: Options) -> None:
    rows, concurrency, sleep = 20_000, 1000, 0.1
    ideal = rows * sleep / concurrency
    data = dataset(rows)
    base = OUT / "latency"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    osmo: list[tuple[Proc, float, float]] = []
    floors: list[Proc] = []
    for i in range(opts.repeats):
        step(
            f"latency: floor and osmo-run, {rows} rows x {sleep}s at {concurrency}, "
            f"run {i + 1}/{opts.repeats}"
        )
        out = base / "floor.jsonl"
        floors.append(
            checked(
                run(
                    [
                        sys.executable,
                        LOOP,
                        "floor",
                        data,
                        out,
                        "-c",
                        str(concurrency),
                        "--sleep",
                        str(sleep),
                    ]
                )
            )
        )
        check_loop_output(out, rows)
        out = base / "osmo-run" / "results.jsonl"
        p = checked(run(osmo_local(data, out, workflow="SleepWorkflow", concurrency=concurrency)))
        check_osmo_output(out, rows)
        first, last = _span(out)
        osmo.append((p, first - p.spawned_at, last - first))
    osmo.sort(key=lambda item: item[0].wall)
    p, startup, span = osmo[0]
    fl = best(floors)
    fl_loop = json.loads(fl.stdout.strip().splitlines()[-1])["loop_sec"]
    opts.report.table(
        f"3. Latency-bound: {rows:,} rows, workflow sleeps {sleep * 1000:.0f} ms, "
        f"concurrency {concurrency}; ideal = rows x 0.1 s / concurrency = {ideal:.2f} s",
        [
            "run",
            "process wall s",
            "vs ideal",
            "first row start -> last row end s",
            "vs ideal",
            "spawn -> first row s",
            "CPU s",
            "peak RSS MiB",
        ],
        [
            [
                "floor: bare asyncio loop, asyncio.sleep",
                f"{fl.wall:.2f}",
                f"{fl.wall / ideal:.2f}x",
                f"{fl_loop:.2f} (loop)",
                f"{fl_loop / ideal:.2f}x",
                "-",
                f"{fl.cpu:.2f}",
                f"{fl.rss_mb:.0f}",
            ],
            [
                "`osmo-run local`",
                f"{p.wall:.2f}",
                f"{p.wall / ideal:.2f}x",
                f"{span:.2f}",
                f"{span / ideal:.2f}x",
                f"{startup:.2f}",
                f"{p.cpu:.2f}",
                f"{p.rss_mb:.0f}",
            ],
        ],
    )
    opts.report.target(
        "3",
        "osmo-run wall vs ideal (process)",
        f"{p.wall / ideal:.2f}x",
        "<= 1.10x",
        p.wall <= 1.10 * ideal,
    )
    opts.report.target(
        "3",
        "osmo-run rows span vs ideal (no start-up)",
        f"{span / ideal:.2f}x",
        "<= 1.10x",
        span <= 1.10 * ideal,
    )
