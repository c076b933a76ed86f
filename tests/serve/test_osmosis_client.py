"""osmosis-ai 0.3.8's own ``RolloutClient`` drives ``osmo-run serve`` unchanged: submit,
429 back-off, long-poll, cancel. The trainer runs in the osmosis venv bench/setup.sh makes
(Python 3.12, osmosis-ai is no dependency of osmo-run); without it the test skips, or fails
where ``OSMO_RUN_REQUIRE_OSMOSIS=1`` (CI)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import OSMO_RUN, REPO, cli_env

OSMOSIS_PYTHON = REPO / "bench" / ".venvs" / "osmosis" / "bin" / "python"
TRAINER = Path(__file__).with_name("osmosis_trainer.py")


def _osmosis_python() -> Path:
    if OSMOSIS_PYTHON.is_file():
        return OSMOSIS_PYTHON
    problem = f"{OSMOSIS_PYTHON} is missing: run bench/setup.sh"
    if os.environ.get("OSMO_RUN_REQUIRE_OSMOSIS") == "1":
        pytest.fail(f"OSMO_RUN_REQUIRE_OSMOSIS=1 but {problem}", pytrace=False)
    pytest.skip(problem)


def _listening(server: subprocess.Popen[str], within: float = 30) -> str:
    """The URL the server prints once it listens."""
    assert server.stderr is not None
    deadline = time.monotonic() + within
    seen = []
    while time.monotonic() < deadline:
        line = server.stderr.readline()
        seen.append(line)
        if match := re.search(r"listening on (http://\S+)", line):
            return match.group(1)
        if not line and server.poll() is not None:
            break
    raise AssertionError("the server never listened: " + "".join(seen))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen[str]]]:
    results = tmp_path / "results.jsonl"
    server = subprocess.Popen(
        [
            str(OSMO_RUN), "serve", "--workflow", "tests.workflows:ScriptedWorkflow",
            "--grader", "tests.workflows:ScriptedGrader", "--code-dir", str(REPO),
            "--port", "0", "--concurrency", "2", "--max-queued", "2", "--display", "none",
            "--output", str(results), "--shutdown-grace", "1",
        ],
        cwd=tmp_path, env=cli_env(), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield _listening(server), results, server
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
        assert server.stderr is not None
        server.stderr.close()


def test_osmosis_rollout_client_drives_osmo_run_serve_unchanged(
    served: tuple[str, Path, subprocess.Popen[str]],
) -> None:
    python = _osmosis_python()
    url, results, server = served
    trainer = subprocess.run(
        [str(python), str(TRAINER), url, "--rollouts", "12"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert trainer.returncode == 0, trainer.stderr
    seen = json.loads(trainer.stdout)
    assert seen["health"]["lifecycle"] == {"accepting_rollouts": True, "active_rollouts": 0}
    by_id = {r["rollout_id"]: r for r in seen["results"]}
    assert sorted(by_id) == sorted(f"step1-{i}" for i in range(12))
    for index in range(12):
        result = by_id[f"step1-{index}"]
        assert result["status"] == "success"
        assert result["sample"]["reward"] == 1.0
        assert result["sample"]["label"] == f"say {index}"
    assert seen["cancel"] == {"dispositions": {"slow-1": "cancelled_running"}}
    assert seen["slow"]["status"] == "cancelled"
    health = httpx.get(f"{url}/health").json()
    assert health["refused_queue_full"] > 0  # 12 at once against 2 running + 2 queued: 429s
    server.send_signal(signal.SIGTERM)
    assert server.wait(30) == 130
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(line["rollout_id"] for line in lines) == sorted([*by_id, "slow-1"])
    assert all(line["served"] is True and len(line["lease_sha256"]) == 64 for line in lines)
    (slow,) = [line for line in lines if line["rollout_id"] == "slow-1"]
    assert slow["status"] == "cancelled"
    assert slow["error_message"] == "cancelled by POST /rollout/cancel"


OSMOSIS_SERVER = REPO / "bench" / "workloads" / "osmosis_server.py"


def test_osmo_run_client_drives_osmosis_own_server_one_request_per_rollout(
    tmp_path: Path,
) -> None:
    """osmosis's server has no batch routes (its /health says nothing of them):
    ``osmo_run.client`` falls back to its per-rollout protocol and gets every result."""
    import asyncio
    import socket

    from osmo_run.client import Rollout, ServeClient

    python = _osmosis_python()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [str(python), str(OSMOSIS_SERVER), "--port", str(port), "--workflow", "noop",
         "--concurrency", "4"],
        cwd=tmp_path, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        health = httpx.get(f"{url}/health", timeout=5).json()

        async def trainer() -> list[tuple[str, str, float | None]]:
            rollouts = [
                Rollout(f"o{k}", [{"role": "user", "content": "2+2"}], "http://127.0.0.1:9/v1",
                        label="4" if k % 2 else "5")
                for k in range(10)
            ]  # fmt: skip
            async with ServeClient(url) as client:
                results = [r async for r in client.run_batch(rollouts)]
            return sorted((r.rollout_id, r.status, r.reward) for r in results)

        got = asyncio.run(asyncio.wait_for(trainer(), 120))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    assert "batch" not in health
    assert got == sorted((f"o{k}", "success", 1.0 if k % 2 else 0.0) for k in range(10))
