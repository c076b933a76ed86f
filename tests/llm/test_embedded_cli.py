"""``llm: embedded`` through the real ``osmo-run local``: the README's LLM command, and no
model server outliving a run that ends normally, is interrupted, or is killed by a row."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from osmo_run.llm.embedded import MODEL_NAME
from osmo_run.run.writing.records import OutputRecord
from tests.conftest import CLI, OSMO_RUN, REPO, WriteJsonl, cli_env, read_jsonl
from tests.llm.conftest import pid_alive, require_embedded

pytestmark = pytest.mark.slow


def _server_pid(manifest: Path) -> int:
    info = json.loads(manifest.read_text(encoding="utf-8"))["info"]
    assert info["llm_server"]["embedded"] == MODEL_NAME
    assert info["llm_base_url"].startswith("http://127.0.0.1:")
    return int(info["llm_server"]["pid"])


def _gone(pid: int, timeout_sec: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_sec
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not pid_alive(pid)


def _spec(tmp_path: Path, **extra: Any) -> Path:
    spec: dict[str, Any] = {
        "workflow": "tests.llm.llm_workflows:ChatThenWorkflow",
        "code_dir": str(REPO),
        "llm": "embedded",
        "concurrency": 2,
        "timeouts": {"agent_sec": 120},
        "retries": {"max_attempts": 1},
        "output": "out/results.jsonl",
        **extra,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
    return path


def test_readme_llm_command_runs_the_example_with_real_token_counts(
    cli: CLI, tmp_path: Path
) -> None:
    require_embedded()
    output = tmp_path / "run" / "results.jsonl"
    proc = cli(
        "local",
        REPO / "datasets" / "llm-small.jsonl",
        "--spec",
        REPO / "configs" / "llm-embedded.yaml",
        "--output",
        output,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    records = read_jsonl(output)
    assert len(records) == 8
    for record in records:
        OutputRecord.model_validate(record)
        assert record["status"] == "success", record["error_message"]
        reply = record["sample"]["messages"][-1]
        assert reply["role"] == "assistant" and reply["content"].strip()
        assert record["info"]["finish_reason"] in ("stop", "length")
        usage = record["usage"]
        assert usage["model_calls"] == 1 and usage["prompt_tokens"] > 0
        assert 0 < usage["completion_tokens"] <= 48 and usage["model_sec"] > 0
    summary = json.loads(output.with_name("results.summary.json").read_text())["usage"]
    assert summary["rollouts"] == 8 and summary["model_calls"] == 8
    assert summary["total_tokens"] == sum(r["usage"]["total_tokens"] for r in records)
    assert summary["per_rollout"]["total_tokens"]["max"] == max(
        r["usage"]["total_tokens"] for r in records
    )
    assert "tokens" in proc.stderr + proc.stdout  # the rendered summary's tokens line
    assert f"{summary['total_tokens']:,} (" in proc.stdout + proc.stderr
    info = json.loads(output.with_name("results.manifest.json").read_text())["info"]
    assert info["llm_server"]["parallel"] == 4  # the spec's concurrency
    assert _gone(_server_pid(output.with_name("results.manifest.json")))


def _slots_busy(base_url: str) -> int:
    url = base_url.removesuffix("/v1") + "/slots"
    with urllib.request.urlopen(url, timeout=5) as response:
        return sum(1 for slot in json.loads(response.read()) if slot["is_processing"])


def test_at_concurrency_8_the_server_decodes_8_at_once(
    tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    """llama.cpp's own /slots report, read while the run goes: 8 requests decoding."""
    require_embedded()
    data = write_jsonl([{"id": f"r{i}", "prompt": f"Tell a story about {i}."} for i in range(8)])
    spec = _spec(
        tmp_path,
        workflow="examples.llm_chat:ChatWorkflow",
        concurrency=8,
        workflow_config={"settings": {"max_tokens": 48}},
    )
    manifest = tmp_path / "out" / "results.manifest.json"
    proc = subprocess.Popen(
        [str(OSMO_RUN), "local", str(data), "--spec", str(spec), "--display", "none"],
        cwd=tmp_path,
        env=cli_env(NO_PROXY="127.0.0.1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    try:
        while proc.poll() is None and not manifest.exists():
            time.sleep(0.05)
        base_url = json.loads(manifest.read_text())["info"]["llm_base_url"]
        while proc.poll() is None and peak < 8:
            try:
                peak = max(peak, _slots_busy(base_url))
            except OSError:
                pass  # the server stopped with the run
            time.sleep(0.05)
        _, stderr = proc.communicate(timeout=240)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, stderr
    assert peak == 8


def test_a_failed_row_fails_the_run_and_stops_the_server(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    require_embedded()
    data = write_jsonl(
        [
            {"id": "ok", "prompt": "Say hi."},
            {"id": "boom", "prompt": "Say hi.", "metadata": {"raise": True}},
        ]
    )
    proc = cli("local", data, "--spec", _spec(tmp_path), "--plain", timeout=120)
    assert proc.returncode == 1, proc.stderr
    rows = {r["row_id"]: r for r in read_jsonl(tmp_path / "out" / "results.jsonl")}
    assert rows["ok"]["status"] == "success"
    assert (rows["boom"]["status"], rows["boom"]["error_category"]) == ("failure", "agent_error")
    assert rows["boom"]["usage"]["model_calls"] == 1  # spent before it failed: still counted
    assert _gone(_server_pid(tmp_path / "out" / "results.manifest.json"))


def _start(tmp_path: Path, data: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(OSMO_RUN), "local", str(data), "--spec", str(_spec(tmp_path)), "--plain"],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for(path: Path, process: subprocess.Popen[str], timeout_sec: float = 90) -> None:
    deadline = time.monotonic() + timeout_sec
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_sigint_mid_run_stops_the_server(tmp_path: Path, write_jsonl: WriteJsonl) -> None:
    require_embedded()
    marker = tmp_path / "asked-the-model"
    data = write_jsonl(
        [
            {
                "id": f"slow{i}",
                "prompt": "Say hi.",
                "metadata": {"sleep": 60, "marker": str(marker)},
            }
            for i in range(3)
        ]
    )
    process = _start(tmp_path, data)
    try:
        _wait_for(marker, process)  # the server is up and has answered a row
        pid = _server_pid(tmp_path / "out" / "results.manifest.json")
        assert pid_alive(pid)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr
    statuses = {r["status"] for r in read_jsonl(tmp_path / "out" / "results.jsonl")}
    assert statuses == {"cancelled"}
    assert _gone(pid, timeout_sec=5), "the model server outlived an interrupted run"


def test_a_row_that_kills_osmo_run_takes_the_server_with_it(
    tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    require_embedded()
    data = write_jsonl([{"id": "crash", "prompt": "Say hi.", "metadata": {"kill": True}}])
    process = _start(tmp_path, data)
    try:
        process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == -signal.SIGKILL
    pid = _server_pid(tmp_path / "out" / "results.manifest.json")
    assert _gone(pid), "the model server outlived a killed osmo-run"
