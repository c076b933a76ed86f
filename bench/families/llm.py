"""LLM-bound rows against a stub endpoint (chat, agents, tools), the embedded model, and
Harbor trials calling the model through the relay; each against its bare floor."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import (
    BENCH,
    DATA,
    OSMO_RUN,
    OUT,
    SOURCES,
    BenchError,
    Options,
    Proc,
    check_loop_output,
    check_osmo_output,
    checked,
    dataset,
    run,
    step,
)

from families.harbor import docker_ok

LLM_FLOOR = BENCH / "workloads" / "llm_floor.py"
STUB_LLM = BENCH / "workloads" / "stub_llm.py"
LLM_WORKLOADS = "workloads.llm_workloads"


class StubLLM:
    """bench/workloads/stub_llm.py in a process of its own: an OpenAI-compatible endpoint
    on 127.0.0.1 answering after ``latency`` seconds and counting calls in flight."""

    def __init__(self, latency: float, tool_turns: int = 0, token_ids: int = 0) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(STUB_LLM),
                "--latency",
                str(latency),
                "--tool-turns",
                str(tool_turns),
                "--token-ids",
                str(token_ids),
            ],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise BenchError("the stub model endpoint did not start")
        self.port = int(json.loads(line)["port"])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def _call(self, path: str, method: str = "GET") -> dict[str, Any]:
        import urllib.request

        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            data: dict[str, Any] = json.loads(response.read())
        return data

    def stats(self) -> dict[str, Any]:
        return self._call("/stats")

    def reset(self) -> None:
        self._call("/reset", "POST")

    def cpu(self) -> float:
        """User + system seconds the stub has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> StubLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def llm_spec(name: str, workflow: str, llm: Any, settings: dict[str, Any] | None = None) -> Path:
    """A run spec for an LLM workload (JSON, which is YAML) in bench/out/llm/."""
    spec = {
        "workflow": f"{LLM_WORKLOADS}:{workflow}",
        "code_dir": str(BENCH),
        "llm": llm,
        "timeouts": {"agent_sec": 600},
        "workflow_config": {"settings": settings or {}},
    }
    path = OUT / "llm" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def osmo_llm(data: Path, spec: Path, out: Path, concurrency: int, *extra: str) -> list[str]:
    return [
        str(OSMO_RUN),
        "local",
        str(data),
        "--spec",
        str(spec),
        "-c",
        str(concurrency),
        "--display",
        "none",
        "-o",
        str(out),
        "--overwrite",
        *extra,
    ]


def floor_llm(kind: str, data: Path, out: Path, concurrency: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(LLM_FLOOR),
        kind,
        str(data),
        str(out),
        "-c",
        str(concurrency),
        *extra,
    ]


def _loop_stats(proc: Proc) -> dict[str, Any]:
    stats: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return stats


def _usage_of(out: Path) -> tuple[int, int, float, float]:
    """(model calls, completion tokens, first start, last end) over an osmo-run output."""
    calls = tokens = 0
    first, last = float("inf"), 0.0
    with open(out, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            usage = record["usage"] or {}
            calls += usage.get("model_calls", 0)
            tokens += usage.get("completion_tokens", 0)
            metrics = (record["sample"] or {}).get("metrics") or {}
            if "t_start" in metrics:
                first = min(first, metrics["t_start"])
                last = max(last, metrics["t_end"])
    return calls, tokens, first, last


@dataclass
class Paired:
    """Best-of-N runs of a floor and of osmo-run on the same work, with the stub's counts."""

    floor: list[tuple[Proc, dict[str, Any]]] = field(default_factory=list)
    osmo: list[tuple[Proc, dict[str, Any]]] = field(default_factory=list)

    def best(self, which: str) -> tuple[Proc, dict[str, Any]]:
        runs = self.floor if which == "floor" else self.osmo
        return min(runs, key=lambda item: item[0].wall)

    def walls(self, which: str) -> str:
        runs = self.floor if which == "floor" else self.osmo
        return ", ".join(f"{p.wall:.2f}" for p, _ in runs)


def _paired(
    opts: Options,
    name: str,
    stub: StubLLM,
    floor_cmd: Callable[[], list[str]],
    osmo_cmd: Callable[[], list[str]],
    check: Callable[[str], None],
) -> Paired:
    """Run floor and osmo-run ``opts.repeats`` times each, interleaved, reading the stub's
    peak in-flight count and its CPU for each run."""
    paired = Paired()
    for i in range(opts.repeats):
        for which, cmd in (("floor", floor_cmd), ("osmo-run", osmo_cmd)):
            step(f"{name}: {which}, run {i + 1}/{opts.repeats}")
            stub.reset()
            stub_cpu = stub.cpu()
            p = checked(run(cmd()))
            check(which)
            stats = {**stub.stats(), "stub_cpu": stub.cpu() - stub_cpu}
            (paired.floor if which == "floor" else paired.osmo).append((p, stats))
    return paired


def w_llm_chat(opts: Options) -> None:
    rows = 5_000 if opts.quick else 20_000
    concurrency, latency = 1000, 0.1
    ideal = rows * latency / concurrency
    data = dataset(rows)
    base = OUT / "llm-chat"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    table = []
    results: dict[float, Paired] = {}
    for lat, n in ((latency, rows), (1.0, 2 * concurrency)):  # 1 s: CPU no longer limits
        with StubLLM(lat) as stub:
            spec = llm_spec("chat", "ChatWorkflow", {"base_url": stub.base_url, "model": "m"})
            sub = data if n == rows else dataset(n)

            def check(which: str, n: int = n) -> None:
                if which == "floor":
                    check_loop_output(base / "floor.jsonl", n)
                else:
                    check_osmo_output(base / "osmo" / "results.jsonl", n)

            results[lat] = _paired(
                opts if lat == latency else Options(opts.quick, False, 1, opts.report),
                f"llm-chat {n} rows x {lat * 1000:.0f} ms at {concurrency}",
                stub,
                lambda sub=sub, stub=stub: floor_llm(
                    "chat", sub, base / "floor.jsonl", concurrency, "--url", stub.base_url
                ),
                lambda sub=sub, spec=spec: osmo_llm(
                    sub, spec, base / "osmo" / "results.jsonl", concurrency
                ),
                check,
            )
        for which, label in (
            ("floor", "floor: one shared aiohttp session, bare loop"),
            ("osmo-run", "`osmo-run local`, `chat_completion`"),
        ):
            p, stats = results[lat].best(which)
            table.append(
                [
                    f"{label}, {n:,} rows x {lat * 1000:.0f} ms",
                    f"{p.wall:.2f} ({results[lat].walls(which)})",
                    f"{p.wall / (n * lat / concurrency):.2f}x",
                    f"{p.cpu:.2f}",
                    f"{stats['stub_cpu']:.2f}",
                    f"{stats['peak_in_flight']:,}",
                    f"{stats['connections']:,}",
                    f"{p.rss_mb:.0f}",
                ]
            )
    opts.report.table(
        f"7. LLM chat path: {rows:,} rows at concurrency {concurrency}, one call each to a "
        f"stub endpoint answering after {latency * 1000:.0f} ms (ideal {ideal:.2f} s); and "
        f"{2 * concurrency:,} rows at 1 s",
        [
            "run",
            "wall s, best (all)",
            "vs ideal",
            "CPU s",
            "stub CPU s",
            "peak in flight (stub)",
            "connections",
            "peak RSS MiB",
        ],
        table,
    )
    floor, _ = results[latency].best("floor")
    osmo, osmo_stats = results[latency].best("osmo-run")
    _, slow_stats = results[1.0].best("osmo-run")
    ratio = osmo.wall / floor.wall
    per_row = (osmo.cpu - floor.cpu) / rows * 1e6
    opts.report.text(
        f"osmo-run/floor: **{ratio:.2f}x** wall, {osmo.cpu / floor.cpu:.2f}x CPU "
        f"({per_row:.0f} µs more CPU per row: the runner's per-row work, dataset validation, "
        "the output record and the summary, besides the call itself). At 100 ms neither "
        "reaches the concurrency: on 2 shared cores a call costs the client and the stub "
        "hundreds of µs of CPU, so fewer than 1,000 calls leave within 100 ms; at 1 s both do."
    )
    opts.report.target("7", "chat path wall vs floor", f"{ratio:.2f}x", "<= 1.2x", ratio <= 1.2)
    opts.report.target(
        "7",
        f"chat path peak in flight (stub), {latency * 1000:.0f} ms",
        f"{osmo_stats['peak_in_flight']:,}",
        f"= {concurrency:,}",
        osmo_stats["peak_in_flight"] == concurrency,
    )
    opts.report.target(
        "7",
        "chat path peak in flight (stub), 1 s",
        f"{slow_stats['peak_in_flight']:,}",
        f"= {concurrency:,}",
        slow_stats["peak_in_flight"] == concurrency,
    )


def w_llm_capture(opts: Options) -> None:
    """The cost of ``llm.capture: tokens`` on the chat path: the same rows, the same
    answers (the stub sends vLLM's ids and logprobs either way), capture off and on."""
    rows = opts.rows or (5_000 if opts.quick else 20_000)
    concurrency, latency, prompt_ids = 1000, 0.1, 64
    data = dataset(rows)
    base = OUT / "llm-capture"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    runs: dict[str, list[Proc]] = {"off": [], "on": []}
    with StubLLM(latency, token_ids=prompt_ids) as stub:
        llm = {"base_url": stub.base_url, "model": "m"}
        specs = {
            "off": llm_spec("chat-capture-off", "ChatWorkflow", llm),
            "on": llm_spec("chat-capture-on", "ChatWorkflow", {**llm, "capture": "tokens"}),
        }
        for i in range(opts.repeats):
            for mode in ("off", "on"):
                step(f"llm-capture {rows} rows at {concurrency}, capture {mode}, run {i + 1}")
                out = base / mode / "results.jsonl"
                runs[mode].append(checked(run(osmo_llm(data, specs[mode], out, concurrency))))
                check_osmo_output(out, rows)
        turns = base / "on" / "results.turns.jsonl"
        with open(turns, encoding="utf-8") as handle:
            lines = sum(1 for _ in handle)
        if lines != rows:
            raise BenchError(f"capture on: {turns} has {lines} lines, not {rows}")
    best = {mode: min(procs, key=lambda p: p.wall) for mode, procs in runs.items()}
    table = [
        [
            f"capture {mode}",
            f"{p.wall:.2f} ({', '.join(f'{q.wall:.2f}' for q in runs[mode])})",
            f"{p.cpu:.2f}",
            f"{p.cpu / rows * 1e6:.0f}",
            f"{p.rss_mb:.0f}",
        ]
        for mode, p in best.items()
    ]
    opts.report.table(
        f"7b. LLM chat path with `llm.capture: tokens` off and on: {rows:,} rows at "
        f"concurrency {concurrency}, one call each to a stub answering after "
        f"{latency * 1000:.0f} ms with {prompt_ids} prompt ids, 5 completion ids and logprobs",
        ["run", "wall s, best (all)", "CPU s", "CPU µs per call", "peak RSS MiB"],
        table,
    )
    extra = (best["on"].cpu - best["off"].cpu) / rows * 1e6
    size = turns.stat().st_size
    opts.report.text(
        f"capture costs **{extra:.0f} µs CPU per call** (on - off, best runs) and "
        f"{best['on'].wall / best['off'].wall:.2f}x the wall; its turns file holds "
        f"{size / rows:.0f} bytes per call."
    )


def w_llm_agents(opts: Options) -> None:
    rows = 1_000 if opts.quick else 5_000
    concurrency, latency = 500, 0.1
    data = dataset(rows)
    base = OUT / "llm-agents"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    table = []
    verdicts = []
    with StubLLM(latency) as stub:
        for kind, workflow, label in (
            ("agents", "AgentsWorkflow", "OpenAI Agents SDK"),
            ("strands", "StrandsWorkflow", "Strands Agents"),
        ):
            spec = llm_spec(kind, workflow, {"base_url": stub.base_url, "model": "m"})

            def check(which: str) -> None:
                if which == "floor":
                    check_loop_output(base / "floor.jsonl", rows)
                else:
                    check_osmo_output(base / "osmo" / "results.jsonl", rows)

            paired = _paired(
                opts,
                f"llm-agents {label}, {rows} rows at {concurrency}",
                stub,
                lambda kind=kind: floor_llm(
                    kind, data, base / "floor.jsonl", concurrency, "--url", stub.base_url
                ),
                lambda spec=spec: osmo_llm(
                    data, spec, base / "osmo" / "results.jsonl", concurrency
                ),
                check,
            )
            floor, floor_stats = paired.best("floor")
            osmo, osmo_stats = paired.best("osmo-run")
            for which, (p, stats), run_label in (
                ("floor", (floor, floor_stats), f"bare {label}, one shared AsyncOpenAI (aiohttp)"),
                ("osmo-run", (osmo, osmo_stats), f"`osmo-run local`, {label} integration"),
            ):
                table.append(
                    [
                        run_label,
                        f"{p.wall:.2f} ({paired.walls(which)})",
                        f"{p.cpu:.2f}",
                        f"{stats['peak_in_flight']:,}",
                        f"{stats['connections']:,}",
                        f"{p.rss_mb:.0f}",
                    ]
                )
            verdicts.append((label, osmo.wall / floor.wall, osmo.cpu / floor.cpu))
    opts.report.table(
        f"8. LLM agent path: {rows:,} rows at concurrency {concurrency}, one model call each "
        f"({latency * 1000:.0f} ms, stub endpoint)",
        ["run", "wall s, best (all)", "CPU s", "peak in flight (stub)", "connections", "RSS MiB"],
        table,
    )
    for label, wall, cpu in verdicts:
        opts.report.target(
            "8", f"{label}: wall vs bare framework", f"{wall:.2f}x", "<= 1.3x", wall <= 1.3
        )
        opts.report.target(
            "8", f"{label}: CPU vs bare framework", f"{cpu:.2f}x", "<= 1.3x", cpu <= 1.3
        )


def w_llm_tools(opts: Options) -> None:
    rows = 300 if opts.quick else 1_000
    concurrency, latency, turns = 500, 0.1, 4
    data = dataset(rows)
    base = OUT / "llm-tools"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    calls = rows * (turns + 1)
    with StubLLM(latency, tool_turns=turns) as stub:
        spec = llm_spec(
            "tools",
            "AgentsWorkflow",
            {"base_url": stub.base_url, "model": "m"},
            {"tool_turns": turns},
        )

        def check(which: str) -> None:
            if which == "floor":
                check_loop_output(base / "floor.jsonl", rows)
            else:
                out = base / "osmo" / "results.jsonl"
                check_osmo_output(out, rows)
                if _usage_of(out)[0] != calls:
                    raise BenchError(f"{out}: expected {calls} model calls")

        paired = _paired(
            opts,
            f"llm-tools {rows} rows x {turns + 1} calls at {concurrency}",
            stub,
            lambda: floor_llm(
                "agents",
                data,
                base / "floor.jsonl",
                concurrency,
                "--url",
                stub.base_url,
                "--tool-turns",
                str(turns),
            ),
            lambda: osmo_llm(data, spec, base / "osmo" / "results.jsonl", concurrency),
            check,
        )
    floor, floor_stats = paired.best("floor")
    osmo, osmo_stats = paired.best("osmo-run")
    if floor_stats["calls"] != calls or osmo_stats["calls"] != calls:
        raise BenchError(f"expected {calls} calls, the stub saw {floor_stats} / {osmo_stats}")
    cpu_us = (osmo.cpu - floor.cpu) / calls * 1e6
    wall_us = (osmo.wall - floor.wall) / calls * 1e6
    opts.report.table(
        f"9. Multi-turn tool-calling agent (OpenAI Agents SDK): {rows:,} rows at concurrency "
        f"{concurrency}, the stub scripts {turns} `add` tool calls then an answer: "
        f"{calls:,} model calls of {latency * 1000:.0f} ms",
        ["run", "wall s, best (all)", "CPU s", "CPU µs per call", "peak in flight", "RSS MiB"],
        [
            [
                label,
                f"{p.wall:.2f} ({paired.walls(which)})",
                f"{p.cpu:.2f}",
                f"{p.cpu / calls * 1e6:.0f}",
                f"{stats['peak_in_flight']:,}",
                f"{p.rss_mb:.0f}",
            ]
            for which, (p, stats), label in (
                (
                    "floor",
                    (floor, floor_stats),
                    "bare Agents SDK, one shared AsyncOpenAI (aiohttp)",
                ),
                ("osmo-run", (osmo, osmo_stats), "`osmo-run local`, Agents integration + session"),
            )
        ],
    )
    opts.report.text(
        f"osmo-run's overhead per model call: **{cpu_us:.0f} µs of CPU** "
        f"({wall_us:.0f} µs of wall), over {calls:,} calls; {osmo.wall / floor.wall:.2f}x "
        "the bare framework's wall time."
    )
    opts.report.target(
        "9",
        "tool-calling agent: osmo-run overhead per call",
        f"{cpu_us:.0f} µs CPU",
        "(reported)",
        None,
    )


def _story_rows(rows: int) -> Path:
    path = DATA / f"stories-{rows}.jsonl"
    DATA.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(rows):
            prompt = f"Tell a long story about a lighthouse keeper named Keeper {i}."
            handle.write(json.dumps({"id": f"s{i:03d}", "user_prompt": prompt}) + "\n")
    return path


def w_llm_embedded(opts: Options) -> None:
    try:
        from osmo_run.llm.embedded import check_available

        check_available()
    except Exception as exc:
        opts.report.text(f"### 10. Embedded model\n\nskipped: {exc}")
        return
    rows, concurrency, max_tokens = (16 if opts.quick else 32), 8, 64
    data = _story_rows(rows)
    base = OUT / "llm-embedded"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    spec = llm_spec(
        "embedded", "ChatWorkflow", "embedded", {"max_tokens": max_tokens, "temperature": 0.0}
    )
    direct: list[tuple[Proc, float]] = []
    osmo: list[tuple[Proc, float]] = []
    for i in range(opts.repeats):
        step(f"llm-embedded: direct and osmo-run, {rows} rows at {concurrency}, run {i + 1}")
        p = checked(
            run(
                floor_llm(
                    "embedded",
                    data,
                    base / "direct.jsonl",
                    concurrency,
                    "--max-tokens",
                    str(max_tokens),
                )
            )
        )
        stats = _loop_stats(p)
        direct.append((p, stats["completion_tokens"] / stats["span_sec"]))
        out = base / "osmo" / "results.jsonl"
        p = checked(run(osmo_llm(data, spec, out, concurrency)))
        check_osmo_output(out, rows)
        _, tokens, first, last = _usage_of(out)
        osmo.append((p, tokens / (last - first)))
    best_direct = max(direct, key=lambda item: item[1])
    best_osmo = max(osmo, key=lambda item: item[1])
    ratio = best_osmo[1] / best_direct[1]
    opts.report.table(
        f"10. Embedded model (SmolLM2-135M, llama.cpp, 1 thread): {rows} rows at concurrency "
        f"{concurrency}, {max_tokens} tokens at most each, temperature 0; completion tokens per "
        "second from the first request to the last answer",
        ["run", "tokens/s, best (all)", "process wall s", "CPU s (with the server)"],
        [
            [
                label,
                f"{best[1]:.1f} ({', '.join(f'{r:.1f}' for _, r in runs)})",
                f"{best[0].wall:.1f}",
                f"{best[0].cpu:.1f}",
            ]
            for label, best, runs in (
                ("the server driven directly (aiohttp, 8 at once)", best_direct, direct),
                ("`osmo-run local`, `llm: embedded`, `chat_completion`", best_osmo, osmo),
            )
        ],
    )
    opts.report.target(
        "10",
        "embedded tokens/s vs driving the server directly",
        f"{ratio:.2f}x",
        ">= 0.90x",
        ratio >= 0.9,
    )


def _per_call(out: Path) -> tuple[float, float, int]:
    """(median model seconds per call, median workflow seconds, calls) over an output."""
    per_call, workflow, calls = [], [], 0
    with open(out, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            usage = record["usage"]
            calls += usage["model_calls"]
            per_call.append(usage["model_sec"] / usage["model_calls"])
            workflow.append(record["timings"]["workflow_sec"])
    return statistics.median(per_call), statistics.median(workflow), calls


def w_llm_harbor(opts: Options) -> None:
    if not docker_ok():
        opts.report.text("### 11. Harbor trials calling a model\n\nskipped: no Docker engine")
        return
    rows, concurrency, calls, latency = (8 if opts.quick else 20), 4, 20, 0.05
    base = OUT / "llm-harbor"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    data = dataset(rows)
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    settings = {"calls": calls}
    with (
        tempfile.TemporaryDirectory(prefix="osmo-run-bench-llm-code-") as staged,
        StubLLM(latency) as stub,
    ):
        code = Path(staged)
        (code / "workloads").mkdir()
        (code / "workloads" / "__init__.py").write_text("")
        shutil.copy(BENCH / "workloads" / "llm_workloads.py", code / "workloads")
        llm = {"base_url": stub.base_url, "model": "m"}
        spec = llm_spec("harbor", "ManyCallsWorkflow", llm, settings)
        harbor_spec = json.loads(spec.read_text())
        harbor_spec["harbor"] = {
            "task_dir": str(SOURCES[0] / "tasks" / "calculator"),
            "env": "docker",
            "prebuild": True,
        }
        harbor_spec["timeouts"] = {"agent_sec": 120}
        spec_h = spec.with_name("harbor-trials.yaml")
        spec_h.write_text(json.dumps(harbor_spec))

        def harbor_cmd(out: Path) -> list[str]:
            return [
                str(OSMO_RUN),
                "harbor",
                str(data),
                "--spec",
                str(spec_h),
                "--user-code-dir",
                str(code),
                "-c",
                str(concurrency),
                "--display",
                "none",
                "-o",
                str(out),
                "--overwrite",
            ]

        step("llm-harbor: warm-up (builds the prebuilt image; not timed)")
        checked(run(harbor_cmd(base / "warmup" / "results.jsonl"), env=env))
        kinds = {
            "local": ("`osmo-run local`, in process (the run's aiohttp pool)", ()),
            "isolated": (
                "`osmo-run local --isolation process` (urllib in the child, as in trials)",
                ("--isolation", "process"),
            ),
            "harbor": ("`osmo-run harbor`, Docker trials, through the loopback relay", None),
        }
        measured: dict[str, list[tuple[Proc, tuple[float, float, int]]]] = {k: [] for k in kinds}
        for i in range(opts.repeats if not opts.quick else 1):
            for key, (_, extra) in kinds.items():
                step(
                    f"llm-harbor: {key}, {rows} rows x {calls} calls at {concurrency}, run {i + 1}"
                )
                out = base / key / "results.jsonl"
                cmd = (
                    harbor_cmd(out)
                    if extra is None
                    else osmo_llm(data, spec, out, concurrency, *extra)
                )
                p = checked(run(cmd, env=env))
                check_osmo_output(out, rows)
                measured[key].append((p, _per_call(out)))
    best_of = {k: min(v, key=lambda item: item[1][0]) for k, v in measured.items()}
    table = []
    for key, (label, _) in kinds.items():
        p, (call_sec, workflow_sec, n) = best_of[key]
        table.append(
            [
                label,
                f"{call_sec * 1000:.1f}",
                f"{(call_sec - latency) * 1000:.1f}",
                f"{workflow_sec:.2f}",
                f"{p.wall:.1f}",
                f"{n:,}",
            ]
        )
    opts.report.table(
        f"11. Harbor trials calling a model: {rows} rows at concurrency {concurrency}, each "
        f"making {calls} calls one after the other to a stub endpoint on the host's loopback "
        f"answering after {latency * 1000:.0f} ms",
        [
            "run",
            "ms per call (median row)",
            "ms above the stub's latency",
            "workflow s (median)",
            "process wall s",
            "calls",
        ],
        table,
    )
    trial = best_of["harbor"][1][0]
    relay_ms = (trial - best_of["local"][1][0]) * 1000
    isolated_ms = (trial - best_of["isolated"][1][0]) * 1000
    opts.report.text(
        f"A call from a trial, through the relay, takes **{relay_ms:+.1f} ms** against the same "
        f"call from the host in process, and {isolated_ms:+.1f} ms against the same stdlib "
        "client in a host child process (`--isolation process`)."
    )
    opts.report.target(
        "11",
        "harbor: a call through the relay vs from the host",
        f"{relay_ms:+.1f} ms",
        "<= +5 ms",
        relay_ms <= 5,
    )
