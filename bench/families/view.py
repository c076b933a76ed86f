"""osmo-run view: the line index of a 1M-row run, its pages, the exports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness import (
    BENCH,
    OSMO_RUN,
    OUT,
    SNAPSHOT_ENV,
    BenchError,
    Options,
    best,
    checked,
    count_lines,
    kill_group,
    run,
    step,
    wait_quiet,
)

VIEW_DATA = BENCH / "workloads" / "view_data.py"
INDEX_BUILD = """
import json, sys, time
from pathlib import Path
from osmo_run.view.index import RowIndex
started = time.perf_counter()
index = RowIndex(Path(sys.argv[1]), Path(sys.argv[2]))
index.refresh()
print(json.dumps({"sec": time.perf_counter() - started, "rows": index.count}))
"""


def _view_run(rows: int) -> Path:
    """A run directory of ``rows`` synthetic records (bench/workloads/view_data.py), made once."""
    folder = OUT / "view" / f"rows-{rows}"
    results = folder / "results.jsonl"
    if not results.exists() or count_lines(results) != rows:
        step(f"view: writing a {rows:,}-row run")
        checked(run([sys.executable, VIEW_DATA, folder, str(rows)], quiet=False))
    return folder


def _get(url: str) -> tuple[float, int, str]:
    import urllib.request

    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as response:
        body = response.read().decode("utf-8")
    return time.perf_counter() - started, response.status, body


def _view_pages(folder: Path, cache: Path, warm_up: bool = False) -> dict[str, float]:
    """Start ``osmo-run view`` on ``folder`` with ``cache``; time its pages, in order: the
    run page as first opened, the same again, page 2, a category filter, free text.
    ``warm_up``: the index is not built yet, so wait out the "indexing" page first."""
    env = {**os.environ, **SNAPSHOT_ENV, "OSMO_RUN_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(OSMO_RUN), "view", str(folder), "--no-browser", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "http://" not in line:
            raise BenchError(f"osmo-run view did not start: {line!r}")
        times = {"start": time.perf_counter() - started}
        base = line[line.index("http://") :].split()[0].rstrip("/")
        # the first request of all: it waits for the index (cached) to load
        times["runs list"], _, listing = _get(base + "/")
        key = listing.split('href="/runs/', 1)[1].split('"', 1)[0]
        run_url = f"{base}/runs/{key}"
        deadline = time.monotonic() + 1800
        while warm_up and "rows-table" not in _get(run_url)[2]:
            if time.monotonic() > deadline:
                raise BenchError(f"{run_url}: still indexing after 30 min")
            time.sleep(1.0)
        for name, url in (
            ("first", run_url),
            ("again", run_url),
            ("page 2", run_url + "?page=2"),
            ("category", run_url + "?category=timeout"),
            ("category page 2", run_url + "?category=timeout&page=2"),
            ("text", run_url + "?q=What+is+123456+%2B"),
        ):
            seconds, status, body = _get(url)
            if status != 200 or "rows-table" not in body:
                raise BenchError(f"{url}: HTTP {status} without a rows table")
            times[name] = seconds
        return times
    finally:
        kill_group(proc.pid)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def w_view(opts: Options) -> None:
    big_rows = 200_000 if opts.quick else 1_000_000
    big, small = _view_run(big_rows), _view_run(100)
    base = OUT / "view"
    results = big / "results.jsonl"
    size_mb = results.stat().st_size / 2**20

    builds = []
    for i in range(opts.repeats if opts.quick else 1):
        cache = base / "cache-build"
        shutil.rmtree(cache, ignore_errors=True)
        step(f"view: index build, {big_rows:,} rows, run {i + 1}")
        proc = checked(run([sys.executable, "-c", INDEX_BUILD, results, cache]))
        builds.append((json.loads(proc.stdout.strip().splitlines()[-1])["sec"], proc))
    build_sec, build_proc = min(builds, key=lambda b: b[0])
    per_million = build_sec * 1_000_000 / big_rows
    index_mb = sum(p.stat().st_size for p in (base / "cache-build").glob("*.idx")) / 2**20

    pages: dict[str, dict[str, float]] = {}
    for label, folder in ((f"{big_rows:,} rows", big), ("100 rows", small)):
        cache = base / f"cache-{folder.name}"
        shutil.rmtree(cache, ignore_errors=True)
        step(f"view: pages of the {label} run (index and summary built, then cached)")
        _view_pages(folder, cache, warm_up=True)  # builds and caches index and summary
        runs_ = []
        for i in range(opts.repeats):
            wait_quiet()
            step(f"view: pages of the {label} run, cached, run {i + 1}/{opts.repeats}")
            runs_.append(_view_pages(folder, cache))
        pages[label] = {k: min(r[k] for r in runs_) for k in runs_[0]}

    export_rows = 10_000
    export_run = _view_run(export_rows)
    exports = {}
    for flag in ("", "--export-all"):
        out = base / f"report{flag or '-default'}.html"
        cmd = [OSMO_RUN, "view", export_run, "--export", out, *([flag] if flag else [])]
        procs = []
        for i in range(opts.repeats):
            step(f"view: export of {export_rows:,} rows {flag}, run {i + 1}/{opts.repeats}")
            procs.append(checked(run(cmd, env={"OSMO_RUN_CACHE_DIR": str(base / "cache-export")})))
        exports[flag or "default"] = (best(procs), out.stat().st_size / 2**20)

    big_label = f"{big_rows:,} rows"
    rows = [
        [
            f"{name}",
            f"{pages[big_label][name]:.3f}",
            f"{pages['100 rows'][name]:.3f}",
        ]
        for name in pages[big_label]
    ]
    opts.report.table(
        f"7. osmo-run view: seconds per request on a fresh `osmo-run view` with its index "
        f"cached ({big_rows:,}-row run, {size_mb:,.0f} MiB, vs a 100-row run)",
        ["request (in this order)", big_label, "100 rows"],
        rows,
    )
    opts.report.text(
        f"Index build ({big_rows:,} rows, {size_mb:,.0f} MiB, empty cache, fresh process): "
        f"{build_sec:.1f} s wall, {build_proc.cpu:.1f} s CPU = **{per_million:.1f} s per "
        f"million rows** ({build_proc.cpu * 1_000_000 / big_rows:.1f} CPU s), peak RSS "
        f"{build_proc.rss_mb:.0f} MiB, index file {index_mb:.0f} MiB. `start` is spawn to "
        "URL printed; `runs list` is the first request, which waits for the cached index and "
        "summary to load; `first` is the run page right after; `text` is free text (a byte "
        "scan of the whole file, then a parse of each candidate line)."
    )
    export_rows_table = [
        [
            name,
            f"{proc.wall:.2f}",
            f"{size:.1f}",
        ]
        for name, (proc, size) in exports.items()
    ]
    opts.report.table(
        f"7. `osmo-run view RUN --export report.html` of a {export_rows:,}-row run "
        "(fresh process, index not cached)",
        ["transcripts", "wall s", "file MiB"],
        export_rows_table,
    )
    first = pages[big_label]["runs list"] + pages[big_label]["first"]
    opts.report.target(
        "7", f"first rows page of a {big_rows:,}-row run (index cached, fresh viewer: runs "
        "list + run page)", f"{first:.2f} s", "< 1 s", first < 1.0,
    )  # fmt: skip
    opts.report.target(
        "7", "index build per million rows", f"{per_million:.1f} s", "reported", None
    )
    default_proc, default_size = exports["default"]
    opts.report.target(
        "7", f"export of {export_rows:,} rows", f"{default_proc.wall:.1f} s, "
        f"{default_size:.1f} MiB", "seconds", default_proc.wall < 60,
    )  # fmt: skip
