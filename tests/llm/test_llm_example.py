"""examples/llm_chat.py against a local OpenAI-compatible stub, through the real CLI."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from tests.conftest import CLI, REPO, WriteJsonl, cli_env, read_jsonl
from tests.llm.stub_model import StubModel

API_KEY = "sk-stub-9d8c7b6a5f4e"
ENV = {"OSMO_TEST_LLM_KEY": API_KEY, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


def _spec(tmp_path: Path, base_url: str, agent_sec: float = 10) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"""
workflow: examples.llm_chat:ChatWorkflow
grader: examples.llm_chat:ContainsLabelGrader
code_dir: {REPO}
workflow_config: {{settings: {{temperature: 0.2, max_tokens: 16}}}}
llm: {{base_url: "{base_url}", model: stub-model, api_key_env: OSMO_TEST_LLM_KEY}}
timeouts: {{agent_sec: {agent_sec}, grader_sec: 5}}
retries: {{max_attempts: 1}}  # each failure mode is asserted on its first and only try
output: out.jsonl
"""
    )
    return spec


def test_chat_workflow_is_graded_and_counts_tokens(
    cli: CLI, stub_model: StubModel, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    data = write_jsonl(
        [
            {"id": "match", "prompt": "say apple please", "label": "APPLE"},
            {"id": "miss", "user_prompt": "say pear", "ground_truth": "banana"},
            {"id": "auth", "prompt": "echo auth", "label": "Bearer"},
            {"id": "limited", "prompt": "please 429", "label": "x"},
            {"id": "crashed", "prompt": "please 500", "label": "x"},
        ]
    )
    # A 2 s deadline: the endpoint's 429 and 500 are retried per call, until the next
    # backoff would pass it.
    spec = _spec(tmp_path, stub_model.base_url, agent_sec=2)
    proc = cli("local", data, "--spec", spec, env=cli_env(**ENV))
    assert proc.returncode == 1, proc.stderr
    rows = {row["row_id"]: row for row in read_jsonl(tmp_path / "out.jsonl")}
    assert (rows["match"]["reward"], rows["miss"]["reward"], rows["auth"]["reward"]) == (
        1.0,
        0.0,
        1.0,
    )
    usage = rows["match"]["usage"]  # counted by chat_completion, from the endpoint's answer
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["model_calls"]) == (3, 3, 1)
    assert usage["total_tokens"] == 6 and usage["model_sec"] >= 0
    assert usage["retried_calls"] == 0
    summary = json.loads((tmp_path / "out.summary.json").read_text())["usage"]
    assert (summary["rollouts"], summary["model_calls"], summary["completion_tokens"]) == (
        3,
        3,
        9,
    )
    assert rows["match"]["info"] == {"finish_reason": "stop"}
    assert rows["match"]["sample"]["messages"][-1] == {
        "role": "assistant",
        "content": "You said: say apple please",
    }
    assert rows["auth"]["sample"]["messages"][-1]["content"] == "auth was Bearer ***"
    for row_id, category, status in (
        ("limited", "rate_limit", 429),
        ("crashed", "model_api_error", 500),
    ):
        row = rows[row_id]
        assert (row["error_category"], row["error_phase"]) == (category, "workflow")
        assert f"answered HTTP {status}" in row["error_message"]
        assert "the next try would pass the rollout's deadline" in row["error_message"]
        # no call answered, but the retried one shows: a rate-limited run is visible
        assert row["usage"]["model_calls"] == 0 and row["usage"]["retried_calls"] == 1

    contents = [request.body["messages"][-1]["content"] for request in stub_model.requests]
    assert contents.count("please 429") >= 2 and contents.count("please 500") >= 2
    assert {request.auth for request in stub_model.requests} == {f"Bearer {API_KEY}"}
    assert {request.path for request in stub_model.requests} == {"/v1/chat/completions"}
    body = stub_model.requests[0].body
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("stub-model", 0.2, 16)
    for path in (tmp_path / "out.jsonl", tmp_path / "out.summary.json"):
        assert API_KEY not in path.read_text()
    assert API_KEY not in proc.stdout + proc.stderr


def test_refused_connection_is_a_model_api_error(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    spec = _spec(tmp_path, f"http://127.0.0.1:{port}/v1", agent_sec=2)  # retried until then
    data = write_jsonl([{"prompt": "hello", "label": "x"}])
    proc = cli("local", data, "--spec", spec, env=cli_env(**ENV))
    assert proc.returncode == 1, proc.stderr
    (row,) = read_jsonl(tmp_path / "out.jsonl")
    assert (row["error_category"], row["error_phase"]) == ("model_api_error", "workflow")
    assert row["error_message"].startswith("ModelAPIError: cannot reach ")
    assert API_KEY not in (tmp_path / "out.jsonl").read_text()
