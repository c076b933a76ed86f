"""Issue 13: what the workflow's own dependencies cost in Harbor trials.

    .venv/bin/python bench/trial_deps.py [--rows 8] [--concurrency 4]

Measures, in one run, with a fresh osmo-run cache (``OSMO_RUN_CACHE_DIR`` under
bench/out/trial-deps) and writes bench/RESULTS-trial-deps.md:

1. resolving on the host: the image probe (first and cached), ``pip download`` into the
   wheelhouse and ``pip install --target`` + archive, for PyYAML and for osmo-run's
   ``openai-agents`` extra;
2. the prebuild: the prebuilt image without dependencies, with PyYAML, with the
   openai-agents set (their dependency layers removed first, so each is built), and the
   same again with everything cached (the second run's start);
3. per trial: ``osmo-run harbor`` over N rows whose workflow imports ``agents`` inside
   ``run``, with the dependencies prebuilt vs uploaded at setup, and a baseline without
   dependencies (the workflow imports ``json``).

Needs the dev venv (osmo-run with the harbor extra) and a Docker engine with
``osmo-run/bookworm`` (``sudo scripts/provision-docker.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "trial-deps"
CODE = REPO / "bench" / "workloads" / "trial_deps_code"
TASK = REPO / "tasks" / "calculator"
RESULTS = REPO / "bench" / "RESULTS-trial-deps.md"
OSMO_RUN = Path(sys.executable).parent / "osmo-run"
SETS = {"PyYAML": ("pyyaml>=6",), "openai-agents extra": ("openai-agents>=0.20", "openai[aiohttp]")}


async def _timed(coroutine: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    value = await coroutine
    return value, time.perf_counter() - started


async def resolve_and_prebuild(lines: list[str]) -> None:
    from osmo_run.backends.harbor import docker as docker_ops
    from osmo_run.backends.harbor.requirements import RequirementSet
    from osmo_run.backends.harbor.runtime import stage_runtime, stage_user_code
    from osmo_run.backends.harbor.wheelhouse import _download, image_python, installed_site, set_key

    image = await docker_ops.task_image(TASK)
    target, probe_cold = await _timed(image_python(image))
    _, probe_warm = await _timed(image_python(image))
    lines += [
        "## 1. Resolving on the host (fresh cache)",
        "",
        f"- image probe (`docker run --rm {image} python3 -c ...`): first {probe_cold:.2f} s, "
        f"cached by image id {probe_warm * 1000:.1f} ms; target: {target.describe()} "
        f"({len(target.platforms)} pip platform tags)",
        "",
        "| set | pip download | pip install --target + byte-compile + archive | wheelhouse "
        "| archive |",
        "|---|---|---|---|---|",
    ]
    archives: dict[str, Path] = {}
    for name, requirements in SETS.items():
        chosen = RequirementSet(requirements)
        wheelhouse, download = await _timed(_download(chosen, target, set_key(chosen, target)))
        archive, install = await _timed(installed_site(chosen, target))
        archives[name] = archive
        size = sum(p.stat().st_size for p in wheelhouse.iterdir())
        lines.append(
            f"| {name} ({', '.join(requirements)}) | {download:.1f} s | {install:.1f} s | "
            f"{size / 1e6:.0f} MB | {archive.stat().st_size / 1e6:.0f} MB |"
        )
    staging = OUT / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    stage_runtime(staging / "runtime")
    lines += [
        "",
        "## 2. Prebuild (the dependency layers removed first; a fresh code dir each)",
        "",
        "| image | cold | second run (all cached) | size |",
        "|---|---|---|---|",
    ]
    for name, archive in [("no dependencies", None), *archives.items()]:
        code = staging / f"code-{time.time_ns()}"
        stage_user_code(CODE, code)
        (code / "marker.txt").write_text(str(time.time_ns()))  # a prebuilt layer of its own
        base_id = await docker_ops.image_id(image)
        if archive is not None:
            deps_tag = await docker_ops.dependencies_image(image, archive)
            await docker_ops.docker("rmi", deps_tag, check=False)
        tag, cold = await _timed(
            docker_ops.prebuild_image(TASK, staging / "runtime", code, archive)
        )
        again, warm = await _timed(
            docker_ops.prebuild_image(TASK, staging / "runtime", code, archive)
        )
        assert tag == again and base_id
        size = int(
            (await docker_ops.docker("image", "inspect", "--format", "{{.Size}}", tag)).strip()
        )
        lines.append(f"| {name} | {cold:.1f} s | {warm:.2f} s | {size / 1e6:.0f} MB |")
    lines.append("")


def _harbor(
    name: str, rows: int, concurrency: int, settings: dict[str, Any], *flags: str
) -> dict[str, Any]:
    directory = OUT / name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    data = directory / "rows.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"r{i}", "prompt": "hi"}) + "\n" for i in range(rows))
    )
    spec = {
        "workflow": "deps_bench:ImportWorkflow",
        "code_dir": str(CODE),
        "concurrency": concurrency,
        "workflow_config": {"settings": settings},
        "timeouts": {"agent_sec": 120},
        "harbor": {"task_dir": str(TASK)},
    }
    if settings.get("module") == "agents":
        spec["requirements"] = list(SETS["openai-agents extra"])
    (directory / "spec.yaml").write_text(json.dumps(spec))
    output = directory / "out" / "results.jsonl"
    command = [
        str(OSMO_RUN),
        "harbor",
        str(data),
        "--spec",
        str(directory / "spec.yaml"),
        "-o",
        str(output),
        "--display",
        "plain",
        *flags,
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ, check=False)
    wall = time.perf_counter() - started
    records = (
        [json.loads(line) for line in output.read_text().splitlines()] if output.exists() else []
    )
    if done.returncode != 0 or len(records) != rows:
        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr[-2000:]}")

    def median(key: str, where: str = "timings") -> float:
        values = [float(r[where].get(key) or 0.0) for r in records]
        return statistics.median(values)

    return {
        "wall": wall,
        "setup": median("setup_sec"),
        "deps": median("dependencies_sec"),
        "workflow": median("workflow_sec"),
        "import": statistics.median(r["sample"]["metrics"]["import_sec"] for r in records),
        "total": median("total_sec"),
    }


def per_trial(lines: list[str], rows: int, concurrency: int) -> None:
    runs = [
        ("no dependencies (imports json), prebuilt", {"module": "json"}, ()),
        ("openai-agents, prebuilt (in the image, byte-compiled)", {"module": "agents"}, ()),
        (
            "openai-agents, uploaded at setup (`--no-prebuild`)",
            {"module": "agents"},
            ("--no-prebuild",),
        ),
        ("no dependencies (imports json), `--no-prebuild`", {"module": "json"}, ("--no-prebuild",)),
    ]
    # the prebuilt image of each is built by a first run that is not measured
    _harbor("warm-up", 1, 1, {"module": "agents"})
    _harbor("warm-up-json", 1, 1, {"module": "json"})
    lines += [
        f"## 3. Per trial: {rows} rows at concurrency {concurrency} "
        "(`osmo-run harbor`; medians over rows)",
        "",
        "| run | wall | setup_sec | of which dependencies_sec | import in workflow "
        "| total_sec per row |",
        "|---|---|---|---|---|---|",
    ]
    for index, (name, settings, flags) in enumerate(runs):
        m = _harbor(f"trials-{index}", rows, concurrency, settings, *flags)
        lines.append(
            f"| {name} | {m['wall']:.1f} s | {m['setup']:.2f} s | {m['deps']:.2f} s | "
            f"{m['import']:.2f} s | {m['total']:.2f} s |"
        )
    lines.append("")


def uv_comparison(lines: list[str], uv: str) -> None:
    """The openai-agents set installed for the image's target by uv instead of pip, cold
    (fresh uv cache) and warm, beside pip's cold figure from section 1."""
    from osmo_run.backends.harbor.wheelhouse import platform_tags

    answer = subprocess.run([uv, "--version"], capture_output=True, text=True).stdout
    version = answer.strip().split(" (")[0]  # "uv 0.13.9"
    tag = platform_tags("x86_64", "glibc 2.36")[0]
    rows = []
    for label in ("cold (empty uv cache)", "warm"):
        target = OUT / f"uv-{time.time_ns()}"
        command = [
            uv,
            "pip",
            "install",
            "-q",
            "--target",
            str(target),
            "--python-version",
            "3.11",
            "--python-platform",
            f"x86_64-{tag.removesuffix('_x86_64')}",
            "--only-binary",
            ":all:",
            *SETS["openai-agents extra"],
        ]
        env = {**os.environ, "UV_CACHE_DIR": str(OUT / "uv-cache")}
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        seconds = time.perf_counter() - started
        outcome = "ok" if done.returncode == 0 else f"failed: {done.stderr.strip()[-200:]}"
        rows.append(f"| uv {label} | {seconds:.1f} s | {outcome} |")
    lines += [
        f"## 4. {version} for comparison: the openai-agents set, resolve + fetch + install "
        "for Python 3.11 on manylinux_2_36_x86_64 (no byte-compile, no archive: pip's "
        "figures for the same steps are section 1's first two columns)",
        "",
        "| tool | time | |",
        "|---|---|---|",
        *rows,
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--uv", help="a uv binary to compare with pip (section 4)")
    args = parser.parse_args()
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    os.environ["OSMO_RUN_CACHE_DIR"] = str(OUT / "cache")
    sys.path.insert(0, str(REPO))
    began = time.time()
    command = " ".join([".venv/bin/python bench/trial_deps.py", *sys.argv[1:]])
    lines = [
        "# Workflow dependencies in Harbor trials (issue 13)",
        "",
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the start "
        "(other sessions share the machine: the absolute times are upper bounds).",
        "",
    ]
    asyncio.run(resolve_and_prebuild(lines))
    per_trial(lines, args.rows, args.concurrency)
    if args.uv:
        uv_comparison(lines, args.uv)
    lines.append(
        f"Took {time.time() - began:.0f} s; load average {os.getloadavg()[0]:.1f} at the end."
    )
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
