"""What every workload shares: the paths, a measured subprocess (wall, CPU, peak RSS, after
the machine is quiet), the inputs (datasets, osmo-run's command line, output checks), the
report the workloads fill (targets, tables, notes), the options, and --rev's snapshot of
osmo_run."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
OUT = BENCH / "out"
DATA = OUT / "data"
BIN = Path(sys.executable).parent
OSMO_RUN = BIN / "osmo-run"
HARBOR = BIN / "harbor"
OSMOSIS_PY = BENCH / ".venvs" / "osmosis" / "bin" / "python"
LOOP = BENCH / "workloads" / "loop.py"
WORKLOADS = "workloads.osmo_run_workloads"
MB = 1024.0  # ru_maxrss is in KiB on Linux; figures are MiB

SNAPSHOT_ENV: dict[str, str] = {}
"""PYTHONPATH for every child when ``--rev`` pins osmo_run to a git revision."""
TREE = ["working tree"]
SOURCES = [ROOT]
"""Where examples/, configs/ and tasks/ are read from: the repository, or the --rev snapshot."""
SNAPSHOT_PATHS = ("osmo_run", "examples", "configs", "tasks")


@dataclass
class Proc:
    """One finished subprocess: wall seconds, peak RSS (KiB), exit code, captured output."""

    cmd: list[str]
    wall: float
    rss_kb: int
    rc: int
    stdout: str
    stderr: str
    rss_timeline: list[tuple[float, int]] = field(default_factory=list)
    cpu: float = 0.0  # user + system seconds of the child (and what it reaped)
    busy_before: float = 0.0  # share of all CPUs busy just before the spawn (other load)
    spawned_at: float = 0.0  # time.time() at the spawn

    @property
    def rss_mb(self) -> float:
        return self.rss_kb / MB


def _cpu_times() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def busy_fraction(interval: float = 1.0) -> float:
    """Share of all CPUs busy over ``interval`` seconds (0..1), from /proc/stat."""
    try:
        busy0, total0 = _cpu_times()
        time.sleep(interval)
        busy1, total1 = _cpu_times()
    except OSError:
        return 0.0
    return (busy1 - busy0) / max(total1 - total0, 1)


QUIET_BELOW = 0.25
QUIET_MAX_WAIT = 30.0
LOAD_SEEN: list[float] = []


def wait_quiet() -> float:
    """Wait (at most QUIET_MAX_WAIT s) until other processes leave the CPUs mostly idle, so
    a shared machine's other work disturbs the figures less; return the last busy share."""
    deadline = time.monotonic() + QUIET_MAX_WAIT
    busy = busy_fraction()
    while busy >= QUIET_BELOW and time.monotonic() < deadline:
        busy = busy_fraction(2.0)
    LOAD_SEEN.append(busy)
    return busy


def _leaf(pid: int) -> int:
    """The deepest first descendant of ``pid`` (the measured process under time/script)."""
    while True:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return pid
        if not children:
            return pid
        pid = int(children[0])


def _sample_rss(pid: int, timeline: list[tuple[float, int]], stop: threading.Event) -> None:
    started = time.perf_counter()
    while not stop.wait(0.2):
        try:
            text = Path(f"/proc/{_leaf(pid)}/status").read_text()
        except OSError:
            continue
        match = re.search(r"VmRSS:\s+(\d+) kB", text)
        if match:
            timeline.append((time.perf_counter() - started, int(match.group(1))))


GNU_TIME = Path("/usr/bin/time")


def run(
    cmd: Sequence[str | Path],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 3600.0,
    sample_rss: bool = False,
    quiet: bool = True,
    wrap: Callable[[list[str]], list[str]] | None = None,
) -> Proc:
    """Run ``cmd`` (cwd: the repository) in its own session; measure wall, CPU, peak RSS.

    Peak RSS comes from ``/usr/bin/time -f %M`` around ``cmd``: a child spawned straight
    from this (large) Python process inherits its high-water RSS, so the child's own
    ``ru_maxrss`` from ``os.wait4`` is wrong (``rss_method_check`` shows it). ``wrap`` puts
    something (``script``) around the timed command. CPU and wall come from ``os.wait4``.
    """
    argv = [str(c) for c in cmd]
    busy = wait_quiet() if quiet else 0.0
    full_env = {**os.environ, **SNAPSHOT_ENV, **(env or {})}
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file,
    ):
        if GNU_TIME.exists():
            argv = [str(GNU_TIME), "-f", "%M", "-o", rss_file.name, *argv]
        if wrap is not None:
            argv = wrap(argv)
        spawned_at = time.time()
        started = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        timer = threading.Timer(timeout, kill_group, (proc.pid,))
        timer.start()
        timeline: list[tuple[float, int]] = []
        stop = threading.Event()
        sampler = None
        if sample_rss:
            sampler = threading.Thread(target=_sample_rss, args=(proc.pid, timeline, stop))
            sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        timer.cancel()
        stop.set()
        if sampler is not None:
            sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        reported = rss_file.read().strip().splitlines()
        rss_kb = int(reported[-1]) if reported and reported[-1].isdigit() else usage.ru_maxrss
        return Proc(
            [str(c) for c in cmd],
            wall,
            rss_kb,
            proc.returncode,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            timeline,
            usage.ru_utime + usage.ru_stime,
            busy,
            spawned_at,
        )


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the session this script started for that child
    except ProcessLookupError:
        pass


class BenchError(Exception):
    pass


def checked(proc: Proc, ok_codes: tuple[int, ...] = (0,)) -> Proc:
    if proc.rc not in ok_codes:
        tail = (proc.stderr or proc.stdout).strip()[-1500:]
        raise BenchError(f"`{shlex.join(proc.cmd)}` exited {proc.rc}:\n{tail}")
    return proc


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def dataset(rows: int, *, ids: bool = True) -> Path:
    """``rows`` identical no-op rows (label "4"), generated once into bench/out/data."""
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"rows-{rows}{'' if ids else '-noid'}.jsonl"
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for i in range(rows):
            row: dict[str, Any] = {"user_prompt": "What is 2 + 2?", "ground_truth": "4"}
            if ids:
                row = {"id": f"r{i:07d}", **row}
            handle.write(json.dumps(row) + "\n")
    tmp.rename(path)
    return path


def osmo_local(
    data: Path,
    out: Path,
    *,
    workflow: str = "NoopWorkflow",
    concurrency: int = 100,
    display: str = "none",
) -> list[str]:
    return [
        str(OSMO_RUN),
        "local",
        str(data),
        "--workflow",
        f"{WORKLOADS}:{workflow}",
        "--grader",
        f"{WORKLOADS}:ExactMatchGrader",
        "--code-dir",
        str(BENCH),
        "-c",
        str(concurrency),
        "--display",
        display,
        "-o",
        str(out),
        "--overwrite",
    ]


def check_osmo_output(out: Path, rows: int) -> None:
    summary = json.loads(out.with_name(out.stem + ".summary.json").read_text())
    ok = summary["by_status"].get("success", 0)
    if ok != rows or count_lines(out) != rows:
        raise BenchError(f"{out}: expected {rows} successful rows, summary says {summary}")


def check_loop_output(out: Path, rows: int, *, parse: bool = False) -> None:
    if count_lines(out) != rows:
        raise BenchError(f"{out}: expected {rows} lines, found {count_lines(out)}")
    if parse:
        with open(out, encoding="utf-8") as handle:
            bad = sum(
                1
                for line in handle
                if (r := json.loads(line))["status"] != "success" or r["reward"] != 1.0
            )
        if bad:
            raise BenchError(f"{out}: {bad} rows did not succeed with reward 1")


def best(procs: list[Proc]) -> Proc:
    """The fastest of repeated runs: load from other processes only ever adds time."""
    return min(procs, key=lambda p: p.wall)


def step(text: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {text}", flush=True)


@dataclass
class Target:
    workload: str
    what: str
    measured: str
    target: str
    met: bool | None  # None: not measured


@dataclass
class Report:
    sections: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def table(self, title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        lines = [f"### {title}", "", "| " + " | ".join(header) + " |"]
        lines.append("|" + "|".join("---" for _ in header) + "|")
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        self.sections.append("\n".join(lines))
        print("\n" + self.sections[-1], flush=True)

    def text(self, text: str) -> None:
        self.sections.append(text)
        print("\n" + text, flush=True)

    def target(self, *args: Any) -> None:
        self.targets.append(Target(*args))


def fmt_rate(rate: float) -> str:
    return f"{rate:,.0f}"


@dataclass
class Options:
    quick: bool
    profile: bool
    repeats: int
    report: Report
    rows: int | None = None
    """``--rows``: the row count of the workloads that take one (llm-capture), for a
    quick check that they run."""
    serve_size: tuple[int, int] | None = None
    """``--serve-size N,C``: the serve family's rollouts and concurrency (a small check run)."""


def rss_method_check(opts: Options) -> None:
    """Which peak-RSS method is reliable: /usr/bin/time vs wait4 vs RUSAGE_CHILDREN deltas."""
    import resource

    alloc = "b = bytearray({n} * 2**20); b[::4096] = b'x' * len(b[::4096])"
    small = [sys.executable, "-c", alloc.format(n=20)]
    big = [sys.executable, "-c", alloc.format(n=200)]
    p_small = run(small, quiet=False)
    p_big = run(big, quiet=False)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    run(small, quiet=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    timed_bare = run([sys.executable, "-c", "pass"], quiet=False)
    with subprocess.Popen([sys.executable, "-c", "pass"]) as bare:
        _, _, usage = os.wait4(bare.pid, 0)
        bare.returncode = 0
    opts.report.notes.append(
        "Peak RSS method: `/usr/bin/time -f %M` around each measured command. Check: children "
        f"touching 20 and 200 MiB report {p_small.rss_mb:.0f} and {p_big.rss_mb:.0f} MiB. "
        "Not used: `os.wait4` straight from this script, because a child inherits its "
        f"parent's high-water RSS at spawn: `python -c pass` reports {usage.ru_maxrss / MB:.0f} "
        f"MiB that way (run.py's own peak: {own / MB:.0f} MiB) but {timed_bare.rss_mb:.0f} MiB "
        "under /usr/bin/time. Also not used: "
        "`RUSAGE_CHILDREN` deltas, which are a maximum over all reaped children rather than "
        f"a sum: the 20 MiB child run after the 200 MiB one added {(after - before) / MB:.0f} MiB."
    )
    if not GNU_TIME.exists():
        opts.report.notes.append("WARNING: /usr/bin/time is missing; RSS figures are wait4's.")


def use_revision(rev: str) -> None:
    """Run osmo_run as committed at ``rev``: ``git archive`` it into bench/out and put that
    first on PYTHONPATH (ahead of the editable install's path), so edits in progress in the
    working tree cannot change or break the figures half-way through."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.strip()
    dest = OUT / f"snapshot-{sha}"
    if not (dest / "tasks").is_dir():
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", sha, *SNAPSHOT_PATHS], capture_output=True, cwd=ROOT, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    SNAPSHOT_ENV["PYTHONPATH"] = str(dest)
    where = run(
        [sys.executable, "-P", "-c", "import osmo_run; print(osmo_run.__file__)"], quiet=False
    ).stdout.strip()
    if not where.startswith(str(dest)):
        raise BenchError(f"--rev: osmo_run still imports from {where}, not {dest}")
    TREE[0] = (
        f"commit {sha} ({rev}): {', '.join(SNAPSHOT_PATHS)} extracted to "
        f"{dest.relative_to(ROOT)} via git archive"
    )
    SOURCES[0] = dest


def setup_osmosis() -> None:
    probe = "import osmosis_ai.rollout.server.app"  # with the server extra (serve family)
    if not OSMOSIS_PY.exists() or run([OSMOSIS_PY, "-c", probe], quiet=False).rc != 0:
        step("bench/setup.sh: creating bench/.venvs/osmosis")
        subprocess.run(["bash", str(BENCH / "setup.sh")], check=True, cwd=ROOT)
