"""A rollout that fails after some model calls keeps what they saw: its record's
``info.calls_before_failure`` holds the conversation as its last answered call sent it, with
the answer, and the viewer shows that as the row's transcript (issue 24 item 4, issue 25
item 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from osmo_run import AgentWorkflow, AgentWorkflowContext, ExecutionRequest, ExecutionResult
from osmo_run.sdk.context import CALLS_BEFORE_FAILURE_KEY
from osmo_run.sdk.llm import chat_completion
from osmo_run.sdk.types import ErrorCategory, Phase, RolloutSample, RolloutStatus
from osmo_run.testing import MockModel, run_workflow_sync


class TwoCallsThenRaises(AgentWorkflow):
    """Asks twice, carrying the conversation on, then fails on the second answer."""

    async def run(self, ctx: AgentWorkflowContext) -> Any:
        messages: list[dict[str, Any]] = list(ctx.prompt)
        for _ in range(2):
            answer = await chat_completion(messages)
            messages = [*messages, answer["choices"][0]["message"]]
            messages.append({"role": "user", "content": "and now?"})
        raise RuntimeError("the parser choked on the model's second answer")


class AppendsToOneList(AgentWorkflow):
    """The usual loop: one list, each answer appended to it after the call."""

    async def run(self, ctx: AgentWorkflowContext) -> Any:
        messages: list[dict[str, Any]] = list(ctx.prompt)
        for _ in range(2):
            answer = await chat_completion(messages)
            messages.append(answer["choices"][0]["message"])
        raise RuntimeError("failed after the second answer")


class RaisesBeforeAnyCall(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> Any:
        raise RuntimeError("failed before asking the model")


def test_a_rollout_failing_after_two_calls_keeps_the_conversation_they_saw() -> None:
    model = MockModel(["first answer", "second answer"])
    result = run_workflow_sync(TwoCallsThenRaises, "What is 17 + 25?", model=model)
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.AGENT_ERROR
    assert result.sample is None
    before = result.info[CALLS_BEFORE_FAILURE_KEY]
    assert before["model_calls"] == 2
    assert [(m["role"], m["content"]) for m in before["messages"]] == [
        ("user", "What is 17 + 25?"),
        ("assistant", "first answer"),
        ("user", "and now?"),
        ("assistant", "second answer"),
    ]


def test_a_rollout_that_made_no_call_and_a_successful_one_carry_nothing_extra() -> None:
    failed = run_workflow_sync(RaisesBeforeAnyCall, "hi", model=MockModel(["unused"]))
    assert failed.status is RolloutStatus.FAILURE
    assert CALLS_BEFORE_FAILURE_KEY not in failed.info


def test_the_agents_integration_keeps_the_last_calls_conversation_too() -> None:
    pytest.importorskip("agents", reason="needs the openai-agents extra")
    from tests.llm.test_openai_agents import QUESTION, AddAgentWorkflow

    class AgentThenRaises(AddAgentWorkflow):
        async def run(self, ctx: AgentWorkflowContext) -> Any:
            await super().run(ctx)
            raise RuntimeError("failed after the agent finished")

    from osmo_run.testing import MockToolCall

    model = MockModel([MockToolCall("add", {"a": 17, "b": 25}), "The sum is 42."])
    result = run_workflow_sync(AgentThenRaises, QUESTION, model=model)
    assert result.status is RolloutStatus.FAILURE, result.error_message
    before = result.info[CALLS_BEFORE_FAILURE_KEY]
    assert before["model_calls"] == 2
    roles = [m["role"] for m in before["messages"]]
    assert roles[0] in ("system", "user") and roles[-2:] == ["tool", "assistant"]
    assert before["messages"][-1]["content"] == "The sum is 42."


def test_the_viewer_shows_the_conversation_of_a_failed_rollout(tmp_path: Path) -> None:
    pytest.importorskip("starlette", reason="needs the view extra")
    import asyncio

    from starlette.testclient import TestClient

    from osmo_run.run.executing.display import NullDisplay
    from osmo_run.run.executing.runner import Runner, WorkItem
    from osmo_run.run.reading.dataset import DatasetRow
    from osmo_run.run.writing.output import OutputWriter
    from osmo_run.testing import FakeBackend
    from osmo_run.view.catalog import Catalog
    from osmo_run.view.server import Viewer, allowed_hosts, create_app

    model = MockModel(["first answer", "the <b>second</b> answer"])
    failed = run_workflow_sync(TwoCallsThenRaises, "What is 17 + 25?", model=model)

    def respond(request: ExecutionRequest) -> ExecutionResult:
        result = ExecutionResult.failure(
            request.id, ErrorCategory.AGENT_ERROR, "the parser choked", Phase.WORKFLOW
        )
        result.info = dict(failed.info)
        return result

    request = ExecutionRequest(id="row-1", prompt=[{"role": "user", "content": "q"}])
    results = tmp_path / "run" / "results.jsonl"

    async def write() -> None:
        with OutputWriter(results) as writer:
            item = WorkItem(DatasetRow(0, 1, "row-1", request), 0, request)
            await Runner(FakeBackend(respond), writer, NullDisplay()).run([item])

    asyncio.run(write())
    assert json.loads(results.read_text())["info"][CALLS_BEFORE_FAILURE_KEY]["model_calls"] == 2
    viewer = Viewer(Catalog.open([results]), tmp_path / "cache")
    app = create_app(viewer, allowed_hosts("127.0.0.1", 8000))
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        index = client.get("/").text
        start = index.index('href="/runs/') + len('href="/runs/')
        key = index[start : index.index('"', start)]
        page = client.get(f"/runs/{key}/rows/0")
    assert page.status_code == 200
    assert "failed after 2 model calls" in page.text
    assert 'id="before-failure"' in page.text
    assert "and now?" in page.text and "first answer" in page.text
    assert "<b>second</b>" not in page.text  # escaped (or rendered inert), never raw HTML


def test_a_sample_is_never_invented_for_a_failure() -> None:
    """The conversation goes to info, not to the sample: a trainer reading samples of
    failed rollouts gets none."""
    model = MockModel(["first answer", "second answer"])
    result = run_workflow_sync(TwoCallsThenRaises, "What is 17 + 25?", model=model)
    assert result.sample is None and not isinstance(result.sample, RolloutSample)


def test_a_workflow_appending_to_its_list_after_the_call_gets_each_message_once() -> None:
    model = MockModel(["first answer", "second answer"])
    result = run_workflow_sync(AppendsToOneList, "What is 17 + 25?", model=model)
    contents = [m["content"] for m in result.info[CALLS_BEFORE_FAILURE_KEY]["messages"]]
    assert contents == ["What is 17 + 25?", "first answer", "second answer"]
