"""What a person waits for at the command line: the live display's cost and start-up."""

from __future__ import annotations

import itertools
import re
import shlex
import shutil
import statistics
import sys

from harness import (
    OSMO_RUN,
    OUT,
    Options,
    Proc,
    best,
    check_osmo_output,
    checked,
    dataset,
    fmt_rate,
    osmo_local,
    run,
    step,
)

FRAME_MARK = "in flight ("


def w_display(opts: Options) -> None:
    if shutil.which("script") is None:
        opts.report.text("### 4. Live display\n\nskipped: `script` (util-linux) is not installed")
        return
    rows = 20_000 if opts.quick else 100_000
    data = dataset(rows)
    base = OUT / "display"
    shutil.rmtree(base, ignore_errors=True)
    env = {"TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    runs: dict[str, list[Proc]] = {"none": [], "live": []}
    for i in range(opts.repeats):
        for kind in ("none", "live"):
            step(
                f"display: --display {kind} under a pty (script), {rows} rows, "
                f"run {i + 1}/{opts.repeats}"
            )
            out = base / kind / "results.jsonl"
            p = checked(
                run(
                    osmo_local(data, out, display=kind),
                    env=env,
                    wrap=lambda argv: ["script", "-qefc", shlex.join(argv), "/dev/null"],
                )
            )
            check_osmo_output(out, rows)
            runs[kind].append(p)
    med = {k: best(v) for k, v in runs.items()}
    rate = {k: rows / p.wall for k, p in med.items()}
    cost = 1 - rate["live"] / rate["none"]
    live = med["live"]
    frames = live.stdout.count(FRAME_MARK)
    counts = [int(n) for n in re.findall(rf"(\d+)/{rows} done", live.stdout)]
    rising = all(a <= b for a, b in itertools.pairwise(counts))
    none_frames = med["none"].stdout.count(FRAME_MARK)
    opts.report.table(
        f"4. Live display: {rows:,} no-op rows at concurrency 100, both runs on a pty "
        "(`script -qefc`, TERM=xterm-256color, 120 columns)",
        ["display", "wall s, best (all)", "rows/s", "CPU s", "peak RSS MiB", "frames", "frames/s"],
        [
            [
                "none",
                f"{med['none'].wall:.2f} ({', '.join(f'{q.wall:.2f}' for q in runs['none'])})",
                fmt_rate(rate["none"]),
                f"{med['none'].cpu:.2f}",
                f"{med['none'].rss_mb:.0f}",
                none_frames,
                "-",
            ],
            [
                "live",
                f"{live.wall:.2f} ({', '.join(f'{q.wall:.2f}' for q in runs['live'])})",
                fmt_rate(rate["live"]),
                f"{live.cpu:.2f}",
                f"{live.rss_mb:.0f}",
                frames,
                f"{frames / live.wall:.1f}",
            ],
        ],
    )
    opts.report.text(
        f"Live cost: **{cost * 100:.1f}%** of throughput. The live run drew {frames} frames "
        f"(rich refreshes at 4/s) with the done-counter rising through "
        f"{len(counts)} readings ({counts[0] if counts else '-'} ... "
        f"{counts[-1] if counts else '-'}){'' if rising else ' (NOT monotonic)'}."
    )
    opts.report.target("4", "live display cost", f"{cost * 100:.1f}%", "< 10%", cost < 0.10)
    opts.report.target(
        "4",
        "live display keeps refreshing",
        f"{frames / live.wall:.1f} frames/s",
        ">= 2 frames/s, counter rising",
        frames / live.wall >= 2 and rising,
    )


def _imported(stderr: str) -> list[tuple[str, int]]:
    """(module, cumulative us) from -X importtime output."""
    found = []
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if match:
            found.append((match.group(3), int(match.group(1))))
    return found


def w_startup(opts: Options) -> None:
    n = 5
    data = dataset(10)
    out = OUT / "startup" / "results.jsonl"
    helps, locals_ = [], []
    step(f"startup: osmo-run --help and a 10-row local run, {n} times each")
    for _ in range(n):
        helps.append(checked(run([OSMO_RUN, "--help"])))
        locals_.append(checked(run(osmo_local(data, out))))
    help_med = statistics.median(p.wall for p in helps)
    local_med = statistics.median(p.wall for p in locals_)
    # Does `osmo-run local` import harbor? -X importtime lists every module it imports.
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    traced = checked(run(osmo_local(data, out), env=env))
    modules = _imported(traced.stderr)
    harbor_mods = [m for m, _ in modules if m == "harbor" or m.startswith("harbor.")]
    heavy = [m for m, _ in modules if m.split(".")[0] in {"litellm", "openai", "docker"}]
    control = run([sys.executable, "-c", "import harbor"], env=env, quiet=False)
    control_hits = sum(1 for m, _ in _imported(control.stderr) if m.startswith("harbor"))
    help_mods = _imported(run([OSMO_RUN, "--help"], env=env, quiet=False).stderr)
    top = sorted((m for m in help_mods if "." not in m[0]), key=lambda m: -m[1])[:5]
    opts.report.table(
        "5. Start-up",
        ["command", f"wall s, median of {n}", "min..max", "peak RSS MiB"],
        [
            [
                "`osmo-run --help`",
                f"{help_med:.3f}",
                f"{min(p.wall for p in helps):.3f}..{max(p.wall for p in helps):.3f}",
                f"{max(p.rss_mb for p in helps):.0f}",
            ],
            [
                "`osmo-run local` 10 rows",
                f"{local_med:.3f}",
                f"{min(p.wall for p in locals_):.3f}..{max(p.wall for p in locals_):.3f}",
                f"{max(p.rss_mb for p in locals_):.0f}",
            ],
        ],
    )
    opts.report.text(
        f"`osmo-run local` (10 rows) imported {len(modules)} modules, **{len(harbor_mods)} from "
        f"harbor**{' (' + ', '.join(harbor_mods[:5]) + ')' if harbor_mods else ''}"
        f"{', and ' + ', '.join(sorted(set(heavy))[:5]) if heavy else ''} "
        f"(`PYTHONPROFILEIMPORTTIME=1`; control: `import harbor` shows {control_hits} harbor "
        "modules the same way). `--help` top-level imports by cumulative time: "
        + ", ".join(f"{m} {us / 1000:.0f} ms" for m, us in top)
        + "."
    )
    opts.report.target(
        "5", "`osmo-run --help` wall", f"{help_med:.3f} s", "< 0.3 s", help_med < 0.3
    )
    opts.report.target(
        "5",
        "`osmo-run local` imports harbor",
        f"{len(harbor_mods)} modules",
        "none",
        not harbor_mods and control_hits > 0,
    )
