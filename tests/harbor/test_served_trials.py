"""A served rollout in a Harbor trial reaches its own request's model endpoint with its own
key (osmo-run issue 23): the endpoint relayed once per run when it is on this machine's
loopback, the key handed to that trial only, through a variable Harbor fills in, and never
written into the trial's config or input files.

These tests run the real backend up to Harbor's trial queue (a stand-in that keeps the
config each trial is submitted with and resolves its environment the way Harbor does), so
they need no container engine; the relay is started on 127.0.0.1 in place of Docker's
bridge. The end-to-end tests with Docker are in ``test_served_trials_docker.py``.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from harbor.models.environment_type import EnvironmentType  # noqa: E402
from harbor.models.trial.config import EnvironmentConfig, TrialConfig  # noqa: E402
from harbor.utils.env import resolve_env_vars  # noqa: E402

from osmo_run.backends.harbor import HarborBackend  # noqa: E402
from osmo_run.backends.harbor import docker as docker_ops  # noqa: E402
from osmo_run.backends.harbor.trial_config import TrialSetup  # noqa: E402
from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig  # noqa: E402
from osmo_run.sdk.context import LLMEndpoint  # noqa: E402
from osmo_run.sdk.sandbox import API_KEY_ENV  # noqa: E402
from osmo_run.sdk.types import ErrorCategory, ExecutionRequest, ExecutionResult  # noqa: E402
from tests.harbor.conftest import CALCULATOR_TASK, HERE  # noqa: E402

SPEC_KEY = "sk-the-run-spec-key-0000"
KEY_A = "sk-rollout-a-key-1111"
KEY_B = "sk-rollout-b-key-2222"
KEY_C = "sk-rollout-c-key-3333"
WORKFLOW = "tests.harbor.harbor_workflows:ScriptedWorkflow"
GRADER = "tests.harbor.harbor_workflows:ScriptedGrader"


@dataclass
class Submitted:
    """What the stand-in queue saw of one trial when it was submitted."""

    config: TrialConfig
    agent_env: dict[str, str]
    """The agent's environment as Harbor resolves it from this process's when the trial
    starts."""
    workflow_input: str
    """The workflow's input file as the trial would upload it."""


@dataclass
class FakeQueue:
    """Harbor's ``TrialQueue`` as far as the backend uses it: each submission is kept, then
    fails as if the engine were gone (the backend records that as ``infra_error``)."""

    submitted: dict[str, Submitted] = field(default_factory=dict)

    def add_hook(self, event: object, hook: Callable[..., Any]) -> None:
        pass

    async def submit(self, config: TrialConfig) -> Any:
        text = await asyncio.to_thread(Path(config.agent.kwargs["input_path"]).read_text)
        self.submitted[json.loads(text)["request"]["id"]] = Submitted(
            config=config, agent_env=resolve_env_vars(config.agent.env), workflow_input=text
        )
        await asyncio.sleep(0.05)  # trials overlap, as they do in Harbor's queue
        raise RuntimeError("no container engine in this test")


@dataclass
class Stub:
    """An HTTP server on 127.0.0.1 recording the paths it was asked for."""

    base_url: str
    paths: list[str] = field(default_factory=list)


@pytest.fixture
def stubs() -> Iterator[Callable[[], Stub]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start() -> Stub:
        stub = Stub(base_url="")

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        stub.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        return stub

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def loopback_bridge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Relays listen on 127.0.0.1 instead of asking Docker for its bridge's address."""

    async def gateway() -> str:
        return "127.0.0.1"

    monkeypatch.setattr(docker_ops, "bridge_gateway", gateway)


def _backend(
    tmp_path: Path, queue: FakeQueue, environment: EnvironmentConfig | None = None
) -> HarborBackend:
    """A backend whose run has a spec endpoint and key of its own, prepared as far as a
    trial needs (what ``prepare`` would stage and check with a container engine)."""
    llm = LLMEndpoint("https://spec-model.example.invalid/v1", "spec-model", SPEC_KEY)
    backend = HarborBackend(
        queue,  # type: ignore[arg-type]
        task_dir=CALCULATOR_TASK,
        user_code_dir=HERE,
        workflow=WORKFLOW,
        grader=GRADER,
        environment_config=environment,
        prebuild_local_image=False,
        trials_dir=tmp_path / "run" / "trials",
        llm=llm,
        llm_api_key_env="SPEC_KEY_ENV",
    )
    backend._setup = TrialSetup(
        workflow_path=WORKFLOW,
        grader_path=GRADER,
        workflow_config=AgentWorkflowConfig(),
        grader_config=GraderConfig(),
        environment=backend._environment,
        staging=tmp_path / "staging",
        trials_dir=tmp_path / "run" / "trials",
        llm=llm,
        llm_url=llm.base_url,
        llm_api_key_env="SPEC_KEY_ENV",
    )
    backend._python_checked[CALCULATOR_TASK.resolve()] = None
    return backend


def _request(rollout_id: str, base_url: str | None, key: str | None) -> ExecutionRequest:
    llm = None if base_url is None else LLMEndpoint(base_url, "policy", key)
    return ExecutionRequest(
        id=rollout_id, prompt=[{"role": "user", "content": "2 + 3?"}], label="5", llm=llm
    )


async def _execute(backend: HarborBackend, *requests: ExecutionRequest) -> list[ExecutionResult]:
    results: list[ExecutionResult] = []
    await asyncio.gather(*(backend.execute(r, results.append, results.append) for r in requests))
    await backend.aclose()
    return results


def _files_holding(root: Path, secrets: tuple[str, ...]) -> list[str]:
    return [
        str(path)
        for path in root.rglob("*")
        if path.is_file() and any(s.encode() in path.read_bytes() for s in secrets)
    ]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:
        body: bytes = answer.read()
        return body


@pytest.mark.usefixtures("loopback_bridge")
def test_each_trial_reaches_its_requests_endpoint_with_its_key_and_one_relay_per_endpoint(
    tmp_path: Path, stubs: Callable[[], Stub], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEC_KEY_ENV", SPEC_KEY)
    first, second = stubs(), stubs()
    queue = FakeQueue()
    requests = [
        _request("a", first.base_url, KEY_A),
        _request("b", first.base_url, KEY_B),
        _request("c", second.base_url, KEY_C),
        _request("d", first.base_url, None),
    ]
    results = asyncio.run(_execute(_backend(tmp_path, queue), *requests))

    assert {r.error_category for r in results} == {ErrorCategory.INFRA_ERROR}
    urls = {i: json.loads(s.workflow_input)["llm"]["base_url"] for i, s in queue.submitted.items()}
    # a loopback endpoint is reached through a relay: another port of this host
    assert urls["a"] != first.base_url and urls["c"] != second.base_url
    # one relay per endpoint, whatever the key; another endpoint, another relay
    assert urls["a"] == urls["b"] == urls["d"] != urls["c"]
    # the request's model name, not the spec's
    assert {json.loads(s.workflow_input)["llm"]["model"] for s in queue.submitted.values()} == {
        "policy"
    }
    keys = {i: s.agent_env.get(API_KEY_ENV) for i, s in queue.submitted.items()}
    assert keys == {"a": KEY_A, "b": KEY_B, "c": KEY_C, "d": None}  # never the spec's key
    for submitted in queue.submitted.values():
        written = submitted.config.model_dump_json() + submitted.workflow_input
        assert not any(k in written for k in (KEY_A, KEY_B, KEY_C, SPEC_KEY))
    assert not [name for name in os.environ if name.startswith("OSMO_RUN_ROLLOUT_KEY_")]
    assert _files_holding(tmp_path, (KEY_A, KEY_B, KEY_C, SPEC_KEY)) == []


@pytest.mark.usefixtures("loopback_bridge")
def test_the_relay_a_request_is_given_reaches_its_endpoint(
    tmp_path: Path, stubs: Callable[[], Stub]
) -> None:
    first, second = stubs(), stubs()
    queue = FakeQueue()
    seen: dict[str, bytes] = {}

    async def submit(config: TrialConfig) -> Any:
        spec = json.loads(
            await asyncio.to_thread(Path(config.agent.kwargs["input_path"]).read_text)
        )
        relayed = spec["llm"]["base_url"]
        assert relayed not in (first.base_url, second.base_url)  # through the relay
        url = relayed + "/ping-" + spec["request"]["id"]
        seen[spec["request"]["id"]] = await asyncio.to_thread(_get, url)
        raise RuntimeError("no container engine in this test")

    queue.submit = submit  # type: ignore[method-assign]
    requests = [_request("a", first.base_url, KEY_A), _request("c", second.base_url, None)]
    asyncio.run(_execute(_backend(tmp_path, queue), *requests))

    assert seen == {"a": b"ok", "c": b"ok"}
    assert first.paths == ["/v1/ping-a"] and second.paths == ["/v1/ping-c"]


def test_a_request_without_an_endpoint_keeps_the_runs_endpoint_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEC_KEY_ENV", SPEC_KEY)
    queue = FakeQueue()
    asyncio.run(_execute(_backend(tmp_path, queue), _request("plain", None, None)))

    submitted = queue.submitted["plain"]
    assert json.loads(submitted.workflow_input)["llm"]["base_url"] == (
        "https://spec-model.example.invalid/v1"
    )
    assert submitted.agent_env == {API_KEY_ENV: SPEC_KEY}
    assert SPEC_KEY not in submitted.config.model_dump_json()


def test_a_remote_environment_refuses_a_loopback_request_and_takes_a_public_one(
    tmp_path: Path,
) -> None:
    queue = FakeQueue()
    remote = EnvironmentConfig(type=EnvironmentType.DAYTONA)
    requests = [
        _request("local", "http://127.0.0.1:8000/v1", KEY_A),
        _request("public", "https://policy.example.invalid/v1", KEY_B),
    ]
    results = {
        r.rollout_id: r for r in asyncio.run(_execute(_backend(tmp_path, queue, remote), *requests))
    }

    refused = results["local"]
    assert refused.error_category is ErrorCategory.VALIDATION_ERROR
    assert refused.error_message is not None and "\n" not in refused.error_message
    assert "chat_completions_url http://127.0.0.1:8000/v1 is a loopback address" in (
        refused.error_message
    )
    assert set(queue.submitted) == {"public"}
    public = queue.submitted["public"]
    assert json.loads(public.workflow_input)["llm"]["base_url"] == (
        "https://policy.example.invalid/v1"
    )
    assert public.agent_env == {API_KEY_ENV: KEY_B}


@pytest.mark.usefixtures("loopback_bridge")
def test_a_loopback_endpoint_with_an_impossible_port_fails_its_rollout_in_one_line(
    tmp_path: Path,
) -> None:
    queue = FakeQueue()
    requests = [_request("bad", "http://127.0.0.1:99999/v1", KEY_A)]
    (result,) = asyncio.run(_execute(_backend(tmp_path, queue), *requests))

    assert result.error_category is ErrorCategory.VALIDATION_ERROR
    assert result.error_message == (
        "chat_completions_url http://127.0.0.1:99999/v1: Port out of range 0-65535"
    )
    assert queue.submitted == {}
