"""The run's model clients, seen from the endpoint: the run's concurrency reaches it, one
client serves the whole run, rate-limited calls are waited and retried, and nothing is
left open when the run ends (Ctrl-C included).

The endpoint is the stub of :mod:`tests.llm.stub_model` (a paid model API cannot be
reached here); the clients, the LocalBackend, the agent frameworks and the CLI are real.
No assertion is a wall-clock upper bound: "64 at once" is counted by the stub, which holds
each call until 64 are in flight (``gather``), so a busy machine cannot hide them.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import signal
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from osmo_run import AgentWorkflow, AgentWorkflowConfig, AgentWorkflowContext
from osmo_run.backends.local import LocalBackend
from osmo_run.sdk.config import ConcurrencyConfig
from osmo_run.sdk.llm import chat_completion
from osmo_run.sdk.model_clients import ModelClients, connection_budget
from osmo_run.sdk.model_retry import CallRetries, CallRetryPolicy, retry_after_sec
from osmo_run.sdk.types import ExecutionRequest, ExecutionResult, RolloutStatus
from tests.conftest import OSMO_RUN, REPO, WriteJsonl, cli_env, read_jsonl
from tests.llm.conftest import require_extra
from tests.llm.stub_model import StubModel

CONCURRENCY = 64


class ChatOnce(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> list[dict[str, Any]]:
        response = await chat_completion(ctx.prompt, max_tokens=4)
        return [*ctx.prompt, response["choices"][0]["message"]]


class AgentsOnce(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> None:
        from agents import Agent, Runner

        from osmo_run.integrations.openai_agents import RolloutSession, rollout_model

        agent = Agent(name="assistant", instructions="Answer.", model=rollout_model())
        await Runner.run(agent, ctx.prompt, session=RolloutSession(), max_turns=2)


class StrandsOnce(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> None:
        from osmo_run.integrations.strands import RolloutAgent

        await RolloutAgent(ctx.prompt).invoke_async()


WORKFLOWS: dict[str, tuple[type[AgentWorkflow], str | None]] = {
    "chat_completion": (ChatOnce, None),
    "openai_agents": (AgentsOnce, "agents"),
    "strands": (StrandsOnce, "strands"),
}
EXTRAS = {"agents": "openai-agents", "strands": "strands"}


def _workflow(name: str) -> type[AgentWorkflow]:
    workflow, module = WORKFLOWS[name]
    if module is not None:
        require_extra(module, EXTRAS[module])
    return workflow


def _requests(n: int, agent_sec: float = 60.0) -> list[ExecutionRequest]:
    return [
        ExecutionRequest(
            f"r{i}", [{"role": "user", "content": f"hello {i}"}], agent_timeout_sec=agent_sec
        )
        for i in range(n)
    ]


def _backend(workflow: type[AgentWorkflow], stub: StubModel, concurrency: int) -> LocalBackend:
    config = AgentWorkflowConfig(concurrency=ConcurrencyConfig(max_concurrent=concurrency))
    return LocalBackend(workflow, config, llm=stub.endpoint)


async def _run_all(
    backend: LocalBackend, requests: list[ExecutionRequest]
) -> list[ExecutionResult]:
    results: list[ExecutionResult] = []
    try:
        await asyncio.gather(*(backend.execute(r, results.append) for r in requests))
    finally:
        await backend.aclose()  # what the run does when it ends
    return results


def _wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("name", list(WORKFLOWS))
def test_the_endpoint_sees_the_runs_concurrency_through_one_client(
    name: str, stub_model: StubModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    workflow = _workflow(name)
    constructed: list[str] = []
    if name != "chat_completion":  # count every AsyncOpenAI the integrations build
        import openai

        class CountingAsyncOpenAI(openai.AsyncOpenAI):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                constructed.append(type(kwargs["http_client"]).__name__)
                super().__init__(*args, **kwargs)

        monkeypatch.setattr(openai, "AsyncOpenAI", CountingAsyncOpenAI)
    stub_model.delay_sec, stub_model.gather = 0.2, CONCURRENCY
    backend = _backend(workflow, stub_model, CONCURRENCY)
    results = asyncio.run(_run_all(backend, _requests(3 * CONCURRENCY)))

    assert [r.status for r in results] == [RolloutStatus.SUCCESS] * (3 * CONCURRENCY), {
        r.error_message for r in results
    }
    assert stub_model.peak_in_flight == CONCURRENCY
    assert len(stub_model.requests) == 3 * CONCURRENCY
    assert stub_model.connections <= CONCURRENCY  # connections were kept alive and reused
    assert all(r.usage is not None and r.usage.model_calls == 1 for r in results)
    if name == "chat_completion":
        assert backend.model_clients.created == {"aiohttp": 1}
    else:
        assert backend.model_clients.created == {"openai": 1}
        assert constructed == ["_DefaultAioHttpClient"]  # openai's aiohttp transport
    assert _wait_until(lambda: stub_model.open_connections == 0)  # closed at the run's end


def test_without_aiohttp_the_thread_pool_still_holds_the_concurrency(
    stub_model: StubModel,
) -> None:
    stub_model.delay_sec, stub_model.gather = 0.2, CONCURRENCY
    backend = _backend(ChatOnce, stub_model, CONCURRENCY)
    backend.model_clients = ModelClients(CONCURRENCY, use_aiohttp=False)
    results = asyncio.run(_run_all(backend, _requests(2 * CONCURRENCY)))
    assert all(r.status is RolloutStatus.SUCCESS for r in results)
    assert stub_model.peak_in_flight == CONCURRENCY  # not asyncio's default pool of 6
    assert backend.model_clients.created == {"threads": 1}


def test_outside_a_run_calls_are_not_capped_by_a_pool(stub_model: StubModel) -> None:
    """Inside a sandbox (no run's clients) each call has a thread of its own."""
    stub_model.delay_sec, stub_model.gather = 0.2, 20

    async def many() -> list[dict[str, Any]]:
        calls = [
            chat_completion([{"role": "user", "content": "hi"}], endpoint=stub_model.endpoint)
            for _ in range(20)
        ]
        return await asyncio.gather(*calls)

    answers = asyncio.run(many())
    assert [a["choices"][0]["message"]["content"] for a in answers] == ["You said: hi"] * 20
    assert stub_model.peak_in_flight == 20


@pytest.mark.parametrize("name", list(WORKFLOWS))
def test_a_429_with_retry_after_is_waited_and_retried(name: str, stub_model: StubModel) -> None:
    workflow = _workflow(name)
    stub_model.fail_next(1, 429, retry_after=1)
    backend = _backend(workflow, stub_model, 4)
    (result,) = asyncio.run(_run_all(backend, _requests(1)))

    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.usage is not None
    assert (result.usage.model_calls, result.usage.retried_calls) == (1, 1)
    first, second = stub_model.requests
    assert second.at - first.at >= 1.0  # the endpoint's Retry-After was honoured
    assert second.body["messages"][-1] == first.body["messages"][-1]


@pytest.mark.parametrize("name", list(WORKFLOWS))
def test_a_call_that_keeps_failing_ends_the_rollout_as_before(
    name: str, stub_model: StubModel
) -> None:
    workflow = _workflow(name)
    stub_model.fail_next(100, 429, retry_after=0)
    backend = _backend(workflow, stub_model, 4)
    backend.model_clients = ModelClients(4, retry=CallRetryPolicy(max_tries=3))
    (result,) = asyncio.run(_run_all(backend, _requests(1)))
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is not None and result.error_category.value == "rate_limit"
    assert len(stub_model.requests) == 3
    assert result.usage is not None and result.usage.retried_calls == 1


def test_interrupted_rows_leave_no_session_or_connection_open(stub_model: StubModel) -> None:
    """What Ctrl-C does to a run in process: rows in flight are cancelled, then the
    backend is closed; every connection is closed and no 'Unclosed' warning follows."""
    stub_model.delay_sec = 5.0
    backend = _backend(ChatOnce, stub_model, 8)

    async def interrupted() -> None:
        tasks = [asyncio.ensure_future(backend.execute(r, lambda _r: None)) for r in _requests(8)]
        assert await asyncio.to_thread(_wait_until, lambda: stub_model.in_flight == 8)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await backend.aclose()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(interrupted())
        gc.collect()
    assert not [w for w in caught if "Unclosed" in str(w.message)]
    assert _wait_until(lambda: stub_model.open_connections == 0)


def test_ctrl_c_on_the_cli_closes_the_runs_clients(
    stub_model: StubModel, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    stub_model.delay_sec = 30.0
    data = write_jsonl([{"id": f"r{i}", "prompt": f"hello {i}"} for i in range(8)])
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"workflow: examples.llm_chat:ChatWorkflow\ncode_dir: {REPO}\nconcurrency: 4\n"
        f'llm: {{base_url: "{stub_model.base_url}", model: stub-model}}\noutput: out.jsonl\n'
    )
    env = cli_env(PYTHONWARNINGS="always::ResourceWarning", NO_PROXY="127.0.0.1")
    proc = subprocess.Popen(
        [str(OSMO_RUN), "local", str(data), "--spec", str(spec), "--display", "plain"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_until(lambda: stub_model.in_flight == 4, timeout=30)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, stderr
    assert "Unclosed" not in stderr and "Traceback" not in stderr
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert len(rows) == 4 and {row["status"] for row in rows} == {"cancelled"}


def test_retry_after_headers_and_backoff() -> None:
    assert retry_after_sec({"retry-after": "3"}) == 3.0
    assert retry_after_sec({"retry-after-ms": "250", "retry-after": "3"}) == 0.25
    assert (
        retry_after_sec({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    )
    assert retry_after_sec({"retry-after": "soon"}) is None
    assert retry_after_sec({}) is None
    policy = CallRetryPolicy(
        initial_backoff_sec=1.0, multiplier=2.0, max_backoff_sec=5.0, jitter=0.5
    )
    for retry, base in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (9, 5.0)):
        assert 0.5 * base <= policy.backoff(retry) <= 1.5 * base
    retries = CallRetries(CallRetryPolicy(max_tries=2), deadline=time.monotonic() + 60)
    assert retries.next_wait(30.0) is not None
    assert retries.next_wait() is None and "gave up after 2 tries" in retries.gave_up_because
    retries = CallRetries(CallRetryPolicy(), deadline=time.monotonic() + 1)
    assert retries.next_wait(5.0) is None and "deadline" in retries.gave_up_because
    assert CallRetries(CallRetryPolicy(max_backoff_sec=10)).next_wait(60.0) is None


def test_a_retry_needs_time_for_the_wait_and_a_try_as_long_as_the_last() -> None:
    """A try that starts just before the deadline ends past it: the row would be a timeout
    instead of the endpoint's own error. Here the first try took 0.3 s, the wait is 0.2 s
    and 0.4 s are left: a second try of 0.3 s would end 0.1 s late, so the call gives up."""
    retries = CallRetries(CallRetryPolicy(), deadline=time.monotonic() + 0.7)
    time.sleep(0.3)
    assert retries.next_wait(0.2) is None and "deadline" in retries.gave_up_because
    quick = CallRetries(CallRetryPolicy(), deadline=time.monotonic() + 0.7)
    assert quick.next_wait(0.2) is not None  # a try of no time: the retry fits


def test_the_soft_open_file_limit_is_raised_toward_the_hard_one() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard < 2048:
        pytest.skip(f"needs a finite hard limit of at least 2048, not {hard}")

    def lower_soft() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    code = (
        "from osmo_run.sdk.model_clients import connection_budget;"
        "import resource;"
        "print(connection_budget(2000)[0], resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    done = subprocess.run(
        [str(Path(OSMO_RUN).with_name("python")), "-c", code],
        preexec_fn=lower_soft,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    budget, raised = map(int, done.stdout.split())
    assert raised == hard
    assert budget == min(2000, hard - 256)
    assert connection_budget(10) == (10, None)


def test_a_low_open_file_limit_caps_connections_not_rows(
    stub_model: StubModel, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    """A hard limit of 400 open files at concurrency 500: one line says so, every row
    succeeds (none is a model_api_error), and the endpoint never sees more than the cap."""
    stub_model.delay_sec = 0.05
    data = write_jsonl([{"id": f"r{i}", "prompt": f"hello {i}"} for i in range(600)])
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"workflow: examples.llm_chat:ChatWorkflow\ncode_dir: {REPO}\nconcurrency: 500\n"
        f'llm: {{base_url: "{stub_model.base_url}", model: stub-model}}\noutput: out.jsonl\n'
    )

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (400, 400))

    proc = subprocess.run(
        [str(OSMO_RUN), "local", str(data), "--spec", str(spec), "--display", "plain"],
        cwd=tmp_path,
        env=cli_env(NO_PROXY="127.0.0.1"),
        preexec_fn=lower,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if "open-file limit" in line]
    assert lines == [
        "osmo-run: open-file limit 400 (ulimit -n) allows 144 model connections: 356 of the "
        "500 rows in flight wait for one; raise the hard limit to lift this"
    ]
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert len(rows) == 600 and {row["status"] for row in rows} == {"success"}
    assert 1 < stub_model.peak_in_flight <= 144
