"""Beyond osmosis: a serving run survives its process. A restarted ``osmo-run serve
--resume`` answers finished rollouts to their original lease tokens, runs again those a
crash (``kill -9``) left unfinished, and writes each rollout's line once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.conftest import OSMO_RUN, REPO, cli_env
from tests.serve.harness import LEASE, body, serving
from tests.serve.test_osmosis_client import _listening

KEY = "sk-restart-9d2e4b"


def test_a_resumed_server_answers_finished_rollouts_to_their_tokens(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path) as first:
            tokens = {rid: await first.admitted(rid) for rid in ("a", "b")}
            answers = {rid: await first.final(rid, token) for rid, token in tokens.items()}
        async with serving(tmp_path, resume_from=first.results) as second:
            for rid, token in tokens.items():
                assert (await second.poll(rid, token)).json() == answers[rid]
                assert (await second.poll(rid, token + "x")).status_code == 403
            assert (await second.submit("a")).status_code == 409
            token_c = await second.admitted("c")
            await second.final("c", token_c)
        ids = [line["rollout_id"] for line in second.lines()]
        assert sorted(ids) == ["a", "b", "c"]
        assert [line["row_index"] for line in second.lines()] == [0, 1, 2]

    asyncio.run(scenario())


def _serve(tmp_path: Path, results: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(OSMO_RUN), "serve", "--workflow", "tests.workflows:ScriptedWorkflow",
            "--grader", "tests.workflows:ScriptedGrader", "--code-dir", str(REPO),
            "--port", "0", "--concurrency", "4", "--display", "none",
            "--output", str(results), *extra,
        ],
        cwd=tmp_path, env=cli_env(), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _final(client: httpx.Client, rollout_id: str, token: str) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer: dict[str, object] = client.get(
            f"/rollout/{rollout_id}/result", headers={LEASE: token}
        ).json()
        if answer["status"] in ("success", "failure", "cancelled"):
            return answer
    raise AssertionError(f"{rollout_id} never finished")


def test_kill_9_with_rollouts_in_flight_then_resume_loses_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    results = tmp_path / "run" / "results.jsonl"
    first = _serve(tmp_path, results)
    tokens: dict[str, str] = {}
    try:
        with httpx.Client(base_url=_listening(first), timeout=30) as client:
            for rid in ("done-1", "done-2"):
                tokens[rid] = client.post("/rollout", json=body(rid)).json()["polling_lease_token"]
                _final(client, rid, tokens[rid])
            for rid in ("flying-1", "flying-2", "flying-key"):
                extra = {"llm_api_key": KEY} if rid == "flying-key" else {}
                answer = client.post("/rollout", json=body(rid, metadata={"sleep": 1.0}, **extra))
                assert answer.status_code == 202
                tokens[rid] = answer.json()["polling_lease_token"]
            time.sleep(0.3)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
        assert first.stderr is not None
        first.stderr.close()
    assert len(results.read_text().splitlines()) == 2  # the finished ones, nothing more

    refused = _serve(tmp_path, results)
    assert refused.wait(30) == 2
    assert refused.stderr is not None
    assert "--resume" in refused.stderr.read()
    refused.stderr.close()

    second = _serve(tmp_path, results, "--resume")
    try:
        with httpx.Client(base_url=_listening(second), timeout=30) as client:
            answers = {rid: _final(client, rid, token) for rid, token in tokens.items()}
            assert client.post("/rollout", json=body("flying-1")).status_code == 409
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 130
    finally:
        if second.poll() is None:
            second.kill()
        assert second.stderr is not None
        second.stderr.close()
    assert {a["status"] for a in answers.values()} == {"success"}
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(line["rollout_id"] for line in lines) == sorted(tokens)
    (keyed,) = [line for line in lines if line["rollout_id"] == "flying-key"]
    assert any("without the request's llm_api_key" in w for w in keyed["warnings"])
    for path in results.parent.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path


def test_a_port_in_use_is_refused_in_one_line(tmp_path: Path) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [
                str(OSMO_RUN), "serve", "--workflow", "tests.workflows:ScriptedWorkflow",
                "--code-dir", str(REPO), "--port", str(port), "--display", "none",
            ],
            cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: --host 127.0.0.1 --port {port}: cannot listen there: Address already in use"
        f" (while attempting to bind on address ('127.0.0.1', {port}))"
    ]


def test_refusals_before_listening_are_one_line_and_exit_2(tmp_path: Path) -> None:
    from tests.conftest import CLI

    cli = CLI(tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text("workflow: tests.workflows:ScriptedWorkflow\njudge: embedded\n")
    base = ["serve", "--workflow", "tests.workflows:ScriptedWorkflow", "--code-dir", REPO]
    cases = [
        ([*base, "--host", "0.0.0.0"], "error: --host 0.0.0.0 listens beyond this machine"),
        ([*base, "--api-key-env", "OSMO_RUN_NO_SUCH_VAR"], "error: --api-key-env"),
        ([*base, "--lease-timeout", "5", "--result-wait", "10"], "error: --lease-timeout"),
        (["serve", "--spec", spec, "--code-dir", REPO], "error: judge: embedded is not started"),
        ([*base, "--display", "fancy"], "error: --display: 'fancy' is not one of"),
    ]
    for args, first in cases:
        proc = cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        (line,) = proc.stderr.splitlines()
        assert line.startswith(first), line
