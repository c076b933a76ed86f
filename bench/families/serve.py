"""``osmo-run serve`` for trainers (issue 23): the real server process driven by a client
process, against ``osmo-run local`` on the same rows and against osmosis-ai 0.3.8's own
rollout server; and admission-to-result latency on an idle server."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from harness import (
    BENCH,
    OSMO_RUN,
    OSMOSIS_PY,
    OUT,
    ROOT,
    SNAPSHOT_ENV,
    BenchError,
    Options,
    Proc,
    check_osmo_output,
    checked,
    dataset,
    run,
    setup_osmosis,
    step,
)

from families.llm import StubLLM, _usage_of, osmo_llm

DRIVER = BENCH / "workloads" / "serve_driver.py"
OSMOSIS_SERVER = BENCH / "workloads" / "osmosis_server.py"
BASE = OUT / "serve"
START_WITHIN = 120.0  # seconds a server gets to listen (a loaded machine starts slowly)


def serve_spec(name: str, workflow: str, model_url: str) -> Path:
    """A run spec (JSON, which is YAML) for the serve family: ``workflow`` from the bench
    workloads and the exact-match grader (every answer is "4", every label "4")."""
    module = (
        "workloads.llm_workloads" if workflow == "ChatWorkflow" else "workloads.osmo_run_workloads"
    )
    spec = {
        "workflow": f"{module}:{workflow}",
        "grader": "workloads.osmo_run_workloads:ExactMatchGrader",
        "code_dir": str(BENCH),
        "llm": {"base_url": model_url, "model": "m"},
        "timeouts": {"agent_sec": 600},
    }
    path = BASE / f"{name}.yaml"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """A rollout server in a process (and session) of its own, its output in a log file;
    ``url`` once it answers. Stopped with SIGTERM (then SIGKILL) on exit."""

    def __init__(self, name: str, cmd: list[str], url: str | None = None) -> None:
        self.log = BASE / f"{name}.log"
        self._log_handle = open(self.log, "w", encoding="utf-8")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**os.environ, **SNAPSHOT_ENV},
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = self._wait_listening(url)

    def _wait_listening(self, url: str | None) -> str:
        deadline = time.monotonic() + START_WITHIN
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if url is None:
                match = re.search(r"listening on (http://\S+)", self.log.read_text("utf-8"))
                if match:
                    return match.group(1)
            else:
                try:
                    with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                        if response.status == 200:
                            return url
                except OSError:
                    pass
            time.sleep(0.2)
        self.stop()
        tail = self.log.read_text("utf-8").strip().splitlines()[-3:]
        raise BenchError(f"{self.log.name}: the server did not listen: {' / '.join(tail)}")

    def cpu(self) -> float:
        """User + system seconds the server has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log_handle.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def osmo_server(name: str, spec: Path, concurrency: int) -> Server:
    results = BASE / f"{name}.jsonl"
    return Server(
        name,
        [
            str(OSMO_RUN), "serve", "--spec", str(spec), "--port", "0",
            "-c", str(concurrency), "--display", "none", "-o", str(results),
            "--overwrite", "--shutdown-grace", "1",
        ],
    )  # fmt: skip


def osmosis_server(name: str, workflow: str, concurrency: int) -> Server:
    port = _free_port()
    return Server(
        name,
        [
            str(OSMOSIS_PY), str(OSMOSIS_SERVER), "--port", str(port),
            "--workflow", workflow, "--concurrency", str(concurrency),
        ],
        f"http://127.0.0.1:{port}",
    )  # fmt: skip


def _driver(client: str, *args: str) -> list[str]:
    python = str(OSMOSIS_PY) if client == "osmosis" else sys.executable
    return [python, str(DRIVER), *args, "--client", client]


def _answer(proc: Proc) -> dict[str, Any]:
    if proc.rc != 0:
        tail = " / ".join(proc.stderr.strip().splitlines()[-2:])
        raise BenchError(f"the driver exited {proc.rc}: {tail[:400]}")
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def _check_all_succeeded(answer: dict[str, Any], n: int, what: str) -> None:
    if answer["statuses"] != {"success": n} or answer.get("wrong_rewards"):
        raise BenchError(
            f"{what}: expected {n} successes with reward 1, saw {answer['statuses']} "
            f"({answer.get('wrong_rewards', 0)} other rewards)"
        )


def _served_run(
    label: str,
    server: Server,
    client: str,
    stub: StubLLM,
    n: int,
    concurrency: int,
    rss_after: int,
) -> dict[str, Any]:
    """One driver run against ``server``: its figures, the server's CPU and the stub's."""
    stub.reset()
    server_cpu = server.cpu()
    proc = run(
        _driver(
            client, "throughput", server.url, "--rollouts", str(n),
            "--concurrency", str(concurrency), "--model-url", stub.base_url,
            "--server-pid", str(server.proc.pid), "--rss-after", str(rss_after),
        ),
        timeout=3600,
    )  # fmt: skip
    answer = _answer(proc)
    _check_all_succeeded(answer, n, label)
    return {
        "proc": proc,
        "wall": proc.wall,
        "inner": answer["wall"],
        "rss": answer["rss_kb"],
        "server_cpu": server.cpu() - server_cpu,
        "stub": stub.stats(),
    }


def w_serve(opts: Options) -> None:
    n, concurrency = opts.serve_size or ((5_000, 1000) if opts.quick else (20_000, 1000))
    latency_count = 100 if opts.quick else 500
    if opts.serve_size:
        latency_count = max(20, n // 3)
    rss_after = 1000 if n >= 2000 else max(1, n // 3)
    latency = 0.1
    BASE.mkdir(parents=True, exist_ok=True)
    load = Path("/proc/loadavg").read_text().split()[:3]
    setup_osmosis()
    data = dataset(n)
    local_out = BASE / "local" / "results.jsonl"
    runs: dict[str, list[dict[str, Any]]] = {}
    failed: dict[str, str] = {}

    def keep(key: str, measure: Any) -> None:
        if key in failed:
            return
        try:
            runs.setdefault(key, []).append(measure())
        except BenchError as exc:
            failed[key] = str(exc)

    with StubLLM(latency) as stub:
        chat_spec = serve_spec("chat", "ChatWorkflow", stub.base_url)
        for i in range(opts.repeats):
            tag = f"serve {n:,} at {concurrency:,}, run {i + 1}/{opts.repeats}"

            def local() -> dict[str, Any]:
                stub.reset()
                proc = checked(run(osmo_llm(data, chat_spec, local_out, concurrency)))
                check_osmo_output(local_out, n)
                _, _, first, last = _usage_of(local_out)  # the rows' own t_start / t_end
                return {
                    "proc": proc,
                    "wall": proc.wall,
                    "inner": last - first,
                    "stub": stub.stats(),
                }

            step(f"{tag}: osmo-run local")
            keep("local", local)
            for key, client in (
                ("serve-osmo", "osmo"),
                ("serve-osmo-single", "osmo-single"),
                ("serve-osmosis", "osmosis"),
            ):
                if client == "osmosis" and i > 0:
                    continue  # once: its client's CPU per rollout makes a run minutes long
                step(f"{tag}: osmo-run serve, {client} client")

                def served(key: str = key, client: str = client) -> dict[str, Any]:
                    with osmo_server(key, chat_spec, concurrency) as server:
                        return _served_run(key, server, client, stub, n, concurrency, rss_after)

                keep(key, served)
            if i > 0:
                continue
            step(f"{tag}: osmosis-ai's server, osmosis client")

            def osmosis() -> dict[str, Any]:
                with osmosis_server("osmosis-osmosis", "chat", concurrency) as server:
                    return _served_run(
                        "osmosis server", server, "osmosis", stub, n, concurrency, rss_after
                    )

            keep("osmosis-osmosis", osmosis)
    _report_throughput(opts, runs, failed, n, concurrency, latency, rss_after, load)
    _latency(opts, latency_count)


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return min(runs, key=lambda r: r["wall"])


def _report_throughput(
    opts: Options,
    runs: dict[str, list[dict[str, Any]]],
    failed: dict[str, str],
    n: int,
    concurrency: int,
    latency: float,
    rss_after: int,
    load: list[str],
) -> None:
    labels = {
        "local": "`osmo-run local`, the same rows",
        "serve-osmo": "`osmo-run serve`, osmo_run.client driver",
        "serve-osmo-single": "`osmo-run serve`, osmo_run.client one request per rollout "
        "(`batch=False`: no batch routes, as before them)",
        "serve-osmosis": "`osmo-run serve`, osmosis-ai `RolloutClient` driver",
        "osmosis-osmosis": "osmosis-ai's own server (uvicorn, `LocalBackend`), `RolloutClient`",
    }
    table = []
    for key, label in labels.items():
        if key in failed:
            table.append([label, f"failed: {failed[key]}", *[""] * 7])
            continue
        best = _best(runs[key])
        walls = ", ".join(f"{r['wall']:.2f}" for r in runs[key])
        rss = best.get("rss") or {}
        mib = {k: v.get("VmRSS", 0) / 1024 for k, v in rss.items()}
        table.append(
            [
                label,
                f"{best['wall']:.2f} ({walls})",
                f"{best['inner']:.2f}" if "inner" in best else "",
                f"{best['proc'].cpu:.2f}",
                f"{best['server_cpu']:.2f}" if "server_cpu" in best else "",
                f"{best['stub']['peak_in_flight']:,}",
                f"{mib['after_k']:.0f}" if "after_k" in mib else "",
                f"{mib['after_n']:.0f}" if "after_n" in mib else "",
                f"{rss['after_n']['VmHWM'] / 1024:.0f}" if "after_n" in rss else "",
            ]
        )
    opts.report.table(
        f"12. Serving trainers: {n:,} rollouts, {concurrency:,} in flight, each one chat call to "
        f"a stub endpoint answering after {latency * 1000:.0f} ms (ideal "
        f"{n * latency / concurrency:.2f} s), graded (exact match)",
        [
            "run",
            "wall s, best (all)",
            "first submission (local: row start) to last result s",
            "driver / local CPU s",
            "server CPU s",
            "peak in flight (stub)",
            f"server RSS MiB after {rss_after:,}",
            f"after {n:,}",
            "server peak RSS MiB",
        ],
        table,
    )
    opts.report.text(
        "Wall is spawn-to-exit of the `osmo-run local` process, and of the driver process for "
        "the served runs (each server was already listening; its start-up is not counted). "
        "Every run is checked: all rollouts succeeded with reward 1. The two runs driven by "
        "osmosis-ai's `RolloutClient` are made once (not best of the repeats): its CPU per "
        "rollout (the driver column) makes each long. Load average (1, 5, 15 min) when the "
        f"family started: {', '.join(load)} on {os.cpu_count()} CPUs."
    )
    for key in ("serve-osmo", "serve-osmosis", "osmosis-osmosis"):
        if key in failed:
            opts.report.target("12", f"{labels[key]}: measured", "failed", "measured", False)
            continue
        best = _best(runs[key])
        peak = best["stub"]["peak_in_flight"]
        opts.report.target(
            "12", f"{labels[key]}: peak in flight (stub)", f"{peak:,}", f"= {concurrency:,}",
            peak == concurrency,
        )  # fmt: skip
        if key.startswith("serve-") and "local" not in failed:
            ratio = best["wall"] / _best(runs["local"])["wall"]
            opts.report.target(
                "12", f"{labels[key]}: wall vs osmo-run local", f"{ratio:.2f}x", "<= 1.3x",
                ratio <= 1.3,
            )  # fmt: skip
        if key == "serve-osmo":
            rss = best["rss"]
            growth = rss["after_n"]["VmRSS"] / rss["after_k"]["VmRSS"]
            opts.report.target(
                "12", f"osmo-run serve RSS after {n:,} vs after {rss_after:,}", f"{growth:.2f}x",
                "<= 1.25x", growth <= 1.25,
            )  # fmt: skip


def _percentiles(seconds: list[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1000, p99 * 1000


def _latency(opts: Options, count: int) -> None:
    """Admission-to-result latency, one rollout at a time against an idle server hosting a
    no-op workflow: osmo-run serve through either client, and osmosis-ai's own server."""
    spec = serve_spec("noop", "NoopWorkflow", "http://127.0.0.1:9/v1")
    table = []
    for served_by, label, client in (
        ("osmo", "`osmo-run serve`, osmo_run.client", "osmo"),
        ("osmo", "`osmo-run serve`, osmosis-ai `RolloutClient`", "osmosis"),
        ("osmosis", "osmosis-ai's own server, `RolloutClient`", "osmosis"),
    ):
        step(f"serve latency: {label}, {count} rollouts one at a time")
        try:
            server = (
                osmo_server(f"latency-osmo-{client}", spec, 4)
                if served_by == "osmo"
                else osmosis_server("latency-osmosis", "noop", 4)
            )
            with server:
                answer = _answer(
                    run(_driver(client, "latency", server.url, "--rollouts", str(count)))
                )
            _check_all_succeeded(answer, count + 20, label)
        except BenchError as exc:
            table.append([label, f"failed: {exc}", "", ""])
            continue
        p50, p99 = _percentiles(answer["seconds"])
        table.append([label, f"{p50:.1f}", f"{p99:.1f}", f"{max(answer['seconds']) * 1000:.1f}"])
    opts.report.table(
        f"12b. Admission to result, idle server, no-op workflow (graded): {count:,} rollouts "
        "one at a time (after 20 left out as warm-up), POST /rollout to the result's answer",
        ["server, client", "p50 ms", "p99 ms", "max ms"],
        table,
    )
