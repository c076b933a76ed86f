"""A request's ``chat_completions_url`` and ``llm_api_key`` are its rollout's ``ctx.llm``,
and the key is a secret of the run: in no results line, error file, display line or
answer, whatever the workflow does with it."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from osmo_run.run.executing.display import PlainDisplay
from tests.llm.stub_model import StubModel
from tests.llm.stub_model import serve as serve_stub
from tests.serve.harness import serving

KEY = "sk-trainer-7f3a9c1e5b"
OTHER_KEY = "sk-second-endpoint-42d1"


@pytest.fixture
def stub() -> Iterator[StubModel]:
    yield from serve_stub(StubModel())


@pytest.fixture
def second_stub() -> Iterator[StubModel]:
    yield from serve_stub(StubModel())


def _every_output(tmp_path: Path) -> str:
    """The text of every file the run wrote."""
    return "\n".join(
        path.read_text(errors="replace") for path in tmp_path.rglob("*") if path.is_file()
    )


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_each_rollout_reaches_its_own_endpoint_with_its_own_key(
    tmp_path: Path, stub: StubModel, second_stub: StubModel, isolation: str
) -> None:
    async def scenario() -> None:
        workflow = "tests.llm.llm_workflows:ChatThenWorkflow"
        async with serving(tmp_path, workflow=workflow, grader=None, isolation=isolation) as s:
            one = await s.admitted("one", url=stub.base_url, llm_api_key=KEY, content="echo auth")
            two = await s.admitted(
                "two", url=second_stub.base_url, llm_api_key=OTHER_KEY, content="echo auth"
            )
            three = await s.admitted("three", url=stub.base_url, content="echo auth")
            answers = {
                rid: await s.final(rid, token)
                for rid, token in (("one", one), ("two", two), ("three", three))
            }
        assert {a["status"] for a in answers.values()} == {"success"}, answers
        assert sorted(r.auth or "-" for r in stub.requests) == ["-", f"Bearer {KEY}"]
        assert [r.auth for r in second_stub.requests] == [f"Bearer {OTHER_KEY}"]
        assert {r.body["model"] for r in stub.requests} == {"osmosis-rollout"}
        # the stub echoed the Authorization header: the answer and the file hold it masked
        reply = answers["one"]["sample"]["messages"][-1]["content"]
        assert KEY not in reply and "***" in reply
        written = _every_output(tmp_path)
        assert KEY not in written and OTHER_KEY not in written

    asyncio.run(scenario())


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_key_the_workflow_prints_stores_and_fails_with_is_masked_everywhere(
    tmp_path: Path, isolation: str, capfd: pytest.CaptureFixture[str]
) -> None:
    shown = io.StringIO()

    async def scenario() -> None:
        workflow = "tests.serve.serve_workflows:KeyQuotingWorkflow"
        async with serving(
            tmp_path,
            workflow=workflow,
            grader=None,
            isolation=isolation,
            display=PlainDisplay(shown, interval_sec=0.0),
        ) as s:
            ok = await s.admitted("ok", llm_api_key=KEY)
            bad = await s.admitted("bad", llm_api_key=KEY, metadata={"fail": True})
            answers = [await s.final("ok", ok), await s.final("bad", bad)]
            health = (await s.client.get("/health")).text
        assert answers[1]["status"] == "failure"
        assert answers[1]["err_category"] == "agent_error"
        assert "***" in answers[1]["err_message"]
        assert answers[0]["sample"]["extra_fields"]["key"] == "***"
        for text in (str(answers), health, shown.getvalue(), _every_output(tmp_path)):
            assert KEY not in text
        assert "FAILURE row bad" in shown.getvalue()

    asyncio.run(scenario())
    captured = capfd.readouterr()
    if isolation == "process":  # the child's output is the row's, not the server's log
        assert KEY not in captured.out + captured.err


def test_a_chat_url_that_refuses_connections_is_the_endpoints_failure_then_503(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        workflow = "tests.llm.llm_workflows:ChatThenWorkflow"
        async with serving(
            tmp_path, workflow=workflow, grader=None, breaker=3, concurrency=3, max_queued=8
        ) as s:
            tokens = {
                f"r{i}": await s.admitted(
                    f"r{i}", url="http://127.0.0.1:9/v1", llm_api_key=KEY, agent_timeout_sec=2
                )
                for i in range(3)
            }
            answers = [await s.final(rid, token) for rid, token in tokens.items()]
            assert {a["err_category"] for a in answers} == {"http_error"}
            await asyncio.sleep(0.2)
            refused = await s.submit("r3", url="http://127.0.0.1:9/v1")
            assert refused.status_code == 503
            assert "model_api_error" in refused.json()["detail"]
            assert KEY not in refused.text
        lines = s.lines()
        assert [line["error_category"] for line in lines] == ["model_api_error"] * 3
        assert KEY not in _every_output(tmp_path)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "workflow",
    ["tests.llm.test_openai_agents:AddAgentWorkflow", "tests.llm.test_strands:AddStrandsWorkflow"],
)
def test_the_agent_integrations_use_each_rollouts_endpoint_one_client_per_endpoint(
    tmp_path: Path, stub: StubModel, second_stub: StubModel, workflow: str
) -> None:
    async def scenario() -> dict[str, int]:
        async with serving(tmp_path, workflow=workflow, grader=None, concurrency=3) as s:
            question = "What is 17 + 25? Use the add tool."
            tokens = {
                "a1": await s.admitted("a1", url=stub.base_url, llm_api_key=KEY, content=question),
                "a2": await s.admitted("a2", url=stub.base_url, llm_api_key=KEY, content=question),
                "b1": await s.admitted(
                    "b1", url=second_stub.base_url, llm_api_key=OTHER_KEY, content=question
                ),
            }
            answers = {rid: await s.final(rid, token) for rid, token in tokens.items()}
            for rid, answer in answers.items():
                assert answer["status"] == "success", (rid, answer)
                assert answer["sample"]["messages"][-1]["content"] == "The sum is 42."
            created = dict(s.run.backend.inner.model_clients.created)  # type: ignore[attr-defined]
        return created

    created = asyncio.run(scenario())
    assert {r.auth for r in stub.requests} == {f"Bearer {KEY}"}
    assert {r.auth for r in second_stub.requests} == {f"Bearer {OTHER_KEY}"}
    assert len(stub.requests) == 4 and len(second_stub.requests) == 2  # two calls a rollout
    assert sum(created.values()) == 2  # one client per endpoint, shared by its rollouts
    assert KEY not in _every_output(tmp_path) and OTHER_KEY not in _every_output(tmp_path)


def test_a_url_given_whole_reaches_chat_completions_once(tmp_path: Path, stub: StubModel) -> None:
    """osmosis's ``chat_completions_url`` is a base URL the agent appends
    ``/chat/completions`` to; a trainer that gives the whole URL is not sent to
    ``.../chat/completions/chat/completions``."""

    async def scenario() -> None:
        workflow = "tests.llm.llm_workflows:ChatThenWorkflow"
        async with serving(tmp_path, workflow=workflow, grader=None) as s:
            whole = stub.base_url.rstrip("/") + "/chat/completions/"
            token = await s.admitted("whole", url=whole)
            answer = await s.final("whole", token)
        assert answer["status"] == "success", answer
        assert [r.path for r in stub.requests] == ["/v1/chat/completions"]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "workflow",
    ["tests.llm.test_openai_agents:AddAgentWorkflow", "tests.llm.test_strands:AddStrandsWorkflow"],
)
def test_rollouts_with_keys_of_their_own_share_one_client_per_endpoint(
    tmp_path: Path, stub: StubModel, workflow: str
) -> None:
    """A trainer that gives every rollout a key (and some a path) of its own: each call
    carries its rollout's key to its rollout's URL, and the server keeps one client (one
    connection pool) for the server, not one per rollout for as long as it serves."""

    async def scenario() -> dict[str, int]:
        async with serving(
            tmp_path, workflow=workflow, grader=None, concurrency=4, max_queued=12
        ) as s:
            question = "What is 17 + 25? Use the add tool."
            tokens = {
                f"k{i}": await s.admitted(
                    f"k{i}",
                    url=stub.base_url + ("" if i % 2 else f"/rollouts/k{i}"),
                    llm_api_key=f"sk-rollout-{i:03d}",
                    content=question,
                )
                for i in range(12)
            }
            for rid, token in tokens.items():
                answer = await s.final(rid, token)
                assert answer["status"] == "success", (rid, answer)
            return dict(s.run.backend.inner.model_clients.created)  # type: ignore[attr-defined]

    created = asyncio.run(scenario())
    assert sorted({r.auth or "" for r in stub.requests}) == [
        f"Bearer sk-rollout-{i:03d}" for i in range(12)
    ]
    assert sum(created.values()) == 1, created
    assert {r.path for r in stub.requests} == {
        "/v1/chat/completions",
        *(f"/v1/rollouts/k{i}/chat/completions" for i in range(0, 12, 2)),
    }
    assert "sk-rollout-" not in _every_output(tmp_path)
