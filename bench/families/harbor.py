"""Harbor trials: osmo-run's rows against `harbor run` on the same tasks (needs Docker)."""

from __future__ import annotations

import json
import random
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from harness import (
    HARBOR,
    OSMO_RUN,
    OUT,
    SOURCES,
    BenchError,
    Options,
    Proc,
    check_osmo_output,
    checked,
    run,
    step,
)


def docker_ok() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _harbor_inputs(rows: int, base: Path, code: Path) -> tuple[Path, Path]:
    """A dataset of ``rows`` additions, the example package staged alone in ``code`` (so the
    trial does not carry bench/out and bench/.venvs), and tasks/calculator plus an oracle
    solution."""
    rnd = random.Random(6)
    data = base / f"harbor-{rows}.jsonl"
    with open(data, "w", encoding="utf-8") as handle:
        for i in range(rows):
            a, b = rnd.randint(2, 99), rnd.randint(2, 99)
            row = {
                "id": f"h{i:02d}",
                "user_prompt": f"What is {a} + {b}?",
                "ground_truth": str(a + b),
            }
            handle.write(json.dumps(row) + "\n")
    shutil.copytree(
        SOURCES[0] / "examples",
        code / "examples",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    task = base / "tasks" / "calculator-oracle"
    shutil.copytree(SOURCES[0] / "tasks" / "calculator", task)
    solve = task / "solution" / "solve.sh"
    solve.parent.mkdir()
    solve.write_text("#!/bin/bash\necho 42 > /app/answer.txt\n")
    solve.chmod(0o755)
    return data, task


def _harbor_job(proc: Proc, jobs: Path, name: str, trials: int) -> float:
    result = json.loads((jobs / name / "result.json").read_text())
    stats = result["stats"]
    if stats["n_completed_trials"] != trials or stats["n_errored_trials"]:
        raise BenchError(f"harbor job {name}: {stats}")
    means = [e["metrics"][0]["mean"] for e in stats["evals"].values()]
    return float(means[0]) if means else float("nan")


def w_harbor(opts: Options) -> None:
    if not docker_ok():
        opts.report.text("### 6. Harbor\n\nskipped: no Docker engine")
        opts.report.target("6", "osmo-run --prebuild vs harbor run", "-", "<= 1.0x", None)
        return
    rows, concurrency = (8 if opts.quick else 20), 4
    base = OUT / "harbor"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    # The staged code lives outside the git work tree: osmo-run ships what git would commit
    # from a directory inside one, and bench/out is git-ignored (it would ship nothing).
    with tempfile.TemporaryDirectory(prefix="osmo-run-bench-code-") as staged:
        _w_harbor(opts, rows, concurrency, base, Path(staged))


def _w_harbor(opts: Options, rows: int, concurrency: int, base: Path, code: Path) -> None:
    data, oracle_task = _harbor_inputs(rows, base, code)
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def osmo(prebuild: bool, out: Path, data_: Path = data) -> list[str]:
        return [
            str(OSMO_RUN),
            "harbor",
            str(data_),
            "--spec",
            str(SOURCES[0] / "configs" / "harbor-example.yaml"),
            "--user-code-dir",
            str(code),
            "-c",
            str(concurrency),
            "--display",
            "none",
            "-o",
            str(out),
            "--overwrite",
            "--prebuild" if prebuild else "--no-prebuild",
        ]

    def harbor_cmd(agent: str, task: Path, name: str) -> list[str]:
        return [
            str(HARBOR),
            "run",
            "-p",
            str(task),
            "-a",
            agent,
            "-e",
            "docker",
            "-n",
            str(concurrency),
            "-k",
            str(rows),
            "-o",
            str(base / "jobs"),
            "--job-name",
            name,
            "-q",
            "-y",
        ]

    step("harbor: warm-up (builds the prebuilt image once; not timed)")
    checked(run(osmo(True, base / "warmup" / "results.jsonl"), env=env))
    results: dict[str, list[tuple[Proc, str]]] = {}
    for i in range(opts.repeats if not opts.quick else 1):
        for key in ("prebuild", "no-prebuild", "harbor-oracle", "harbor-nop"):
            step(f"harbor: {key}, {rows} rows at concurrency {concurrency}, run {i + 1}")
            if key.startswith("harbor-"):
                agent = key.removeprefix("harbor-")
                task = oracle_task if agent == "oracle" else SOURCES[0] / "tasks" / "calculator"
                name = f"{agent}-{i}"
                p = checked(run(harbor_cmd(agent, task, name), env=env))
                mean = _harbor_job(p, base / "jobs", name, rows)
                why = "oracle runs solve.sh" if agent == "oracle" else "nop agent: no answer"
                detail = f"reward mean {mean:g} ({why})"
            else:
                out = base / key / "results.jsonl"
                p = checked(run(osmo(key == "prebuild", out), env=env))
                check_osmo_output(out, rows)
                with open(out, encoding="utf-8") as handle:
                    timings = [json.loads(line)["timings"] for line in handle]

                def med_of(key: str, timings: list[dict[str, Any]] = timings) -> str:
                    return f"{statistics.median(t[key] or 0 for t in timings):.1f}"

                detail = (
                    f"all {rows} rows success, reward 1; per-row medians: setup "
                    f"{med_of('setup_sec')} s, workflow {med_of('workflow_sec')} s, "
                    f"grader {med_of('grader_sec')} s"
                )
            results.setdefault(key, []).append((p, detail))
    labels = {
        "prebuild": "`osmo-run harbor --prebuild`",
        "no-prebuild": "`osmo-run harbor --no-prebuild`",
        "harbor-oracle": "`harbor run -a oracle` (tasks/calculator + solve.sh)",
        "harbor-nop": "`harbor run -a nop` (tasks/calculator)",
    }
    med = {k: min(v, key=lambda item: item[0].wall) for k, v in results.items()}
    ref = med["harbor-oracle"][0].wall
    table = [
        [
            labels[k],
            f"{p.wall:.1f}",
            f"{p.wall / rows:.2f}",
            f"{p.wall / ref:.2f}x",
            f"{p.rss_mb:.0f}",
            detail,
        ]
        for k, (p, detail) in med.items()
    ]
    opts.report.table(
        f"6. Harbor (Docker): {rows} rows / trials of tasks/calculator at concurrency "
        f"{concurrency}, spawn-to-exit",
        ["run", "wall s", "s per row", "vs harbor oracle", "peak RSS MiB (CLI)", "check"],
        table,
    )
    pre = med["prebuild"][0].wall
    nop = med["harbor-nop"][0].wall
    opts.report.target(
        "6",
        "osmo-run --prebuild vs `harbor run` oracle",
        f"{pre / ref:.2f}x",
        "<= 1.0x",
        pre <= ref,
    )
    opts.report.target(
        "6", "osmo-run --prebuild vs `harbor run` nop", f"{pre / nop:.2f}x", "<= 1.0x", pre <= nop
    )
