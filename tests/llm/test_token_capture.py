"""Token-exact turns (``llm.capture: tokens``, issue 24 feature 3): every model call of a
rollout asks for token ids and logprobs as vLLM names them, and the rollout keeps each
call's turn, in order, exactly as the endpoint sent it, also when it fails."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.llm import chat_completion
from osmo_run.sdk.turns import missing_ids, missing_ids_notice, turn_of
from osmo_run.sdk.types import RolloutStatus
from osmo_run.testing import run_workflow_sync
from tests.llm.stub_model import StubModel


class ThreeTurns(AgentWorkflow):
    """Three calls, each carrying the conversation on; ``settings["raise_after"]`` fails
    the rollout after that many; ``settings["params"]`` are passed to every call."""

    async def run(self, ctx: AgentWorkflowContext) -> Any:
        messages: list[dict[str, Any]] = list(ctx.prompt)
        params = ctx.config.settings.get("params", {})
        turns = ctx.config.settings.get("turns", 3)
        for number in range(1, turns + 1):
            answer = await chat_completion(messages, **params)
            messages.append(answer["choices"][0]["message"])
            if number == ctx.config.settings.get("raise_after"):
                raise RuntimeError(f"the parser choked on answer {number}")
            messages.append({"role": "user", "content": f"and turn {number + 1}?"})
        return messages


def captured(stub: StubModel) -> Any:
    return dataclasses.replace(stub.endpoint, capture_tokens=True)


def test_each_call_asks_for_ids_and_the_turns_hold_exactly_the_stubs_in_order(
    stub_model: StubModel,
) -> None:
    stub_model.token_ids = True
    result = run_workflow_sync(ThreeTurns, "What is 17 + 25?", llm=captured(stub_model))
    assert result.status is RolloutStatus.SUCCESS
    for request in stub_model.requests:
        assert request.body["logprobs"] is True
        assert request.body["return_token_ids"] is True
    assert result.turns is not None
    assert len(result.turns) == 3
    assert [
        {k: turn[k] for k in ("prompt_token_ids", "completion_token_ids", "logprobs")}
        for turn in result.turns
    ] == stub_model.token_answers
    first, _, third = result.turns
    assert first["model"] == "stub-model"
    assert first["finish_reason"] == "stop"
    assert first["messages"] == [{"role": "user", "content": "What is 17 + 25?"}]
    assert [m["content"] for m in third["messages"]] == [
        "What is 17 + 25?",
        "You said: What is 17 + 25?",
        "and turn 2?",
        "You said: and turn 2?",
        "and turn 3?",
    ]


def test_a_rollout_raising_after_two_calls_keeps_both_turns(stub_model: StubModel) -> None:
    stub_model.token_ids = True
    result = run_workflow_sync(
        ThreeTurns, "hi", llm=captured(stub_model), settings={"raise_after": 2}
    )
    assert result.status is RolloutStatus.FAILURE
    assert result.turns is not None
    assert [t["completion_token_ids"] for t in result.turns] == [
        a["completion_token_ids"] for a in stub_model.token_answers
    ]
    assert len(result.turns) == 2


def test_a_field_the_caller_set_is_not_overwritten(stub_model: StubModel) -> None:
    stub_model.token_ids = True
    result = run_workflow_sync(
        ThreeTurns,
        "hi",
        llm=captured(stub_model),
        settings={"params": {"logprobs": False}, "turns": 1},
    )
    assert stub_model.requests[0].body["logprobs"] is False
    assert stub_model.requests[0].body["return_token_ids"] is True
    assert result.turns is not None
    assert result.turns[0]["logprobs"] is None  # not asked, so none came
    assert (
        result.turns[0]["completion_token_ids"]
        == stub_model.token_answers[0]["completion_token_ids"]
    )


def test_without_capture_nothing_is_asked_or_kept(stub_model: StubModel) -> None:
    stub_model.token_ids = True
    result = run_workflow_sync(ThreeTurns, "hi", llm=stub_model.endpoint)
    assert result.status is RolloutStatus.SUCCESS
    assert result.turns is None
    assert all("return_token_ids" not in r.body for r in stub_model.requests)
    assert all("logprobs" not in r.body for r in stub_model.requests)


def test_an_endpoint_without_ids_is_said_once_for_fifty_calls(
    stub_model: StubModel, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_workflow_sync(ThreeTurns, "hi", llm=captured(stub_model), settings={"turns": 50})
    assert result.status is RolloutStatus.SUCCESS
    assert result.turns is not None and len(result.turns) == 50
    assert all(t["completion_token_ids"] is None for t in result.turns)
    assert result.turns[0]["finish_reason"] == "stop"  # recorded with what came
    notice = missing_ids_notice(stub_model.endpoint.chat_completions_url)
    assert capsys.readouterr().err.splitlines() == [notice]


class TwoCallsKeepingTheAnswers(AgentWorkflow):
    """Two short calls; the answers' own per-token ids (llama.cpp puts one on each logprob
    entry) in ``info`` for the test to compare."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        messages: list[dict[str, Any]] = list(ctx.prompt)
        answers = []
        for _ in range(2):
            answer = await chat_completion(messages, max_tokens=6, temperature=0.0)
            answers.append(
                {
                    "ids": [e["id"] for e in answer["choices"][0]["logprobs"]["content"]],
                    "completion_tokens": answer["usage"]["completion_tokens"],
                }
            )
            messages += [answer["choices"][0]["message"], {"role": "user", "content": "more"}]
        return AgentWorkflowOutput(messages=messages[:-1], info={"answers": answers})


def test_the_embedded_models_server_gives_completion_ids_and_logprobs_not_prompt_ids(
    embedded_llm: LLMEndpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """llama.cpp's server answers ``logprobs: true`` with each token's id and logprob (it
    knows no ``return_token_ids``): the completion's ids are those, exactly; the prompt's
    ids do not come, which is said once."""
    llm = dataclasses.replace(embedded_llm, capture_tokens=True)
    result = run_workflow_sync(TwoCallsKeepingTheAnswers, "Say hi", llm=llm, timeout_sec=300)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.turns is not None and len(result.turns) == 2
    answers = result.info["answers"]
    for turn, answer in zip(result.turns, answers, strict=True):
        assert turn["completion_token_ids"] == answer["ids"]
        assert len(turn["completion_token_ids"]) == answer["completion_tokens"]
        assert len(turn["logprobs"]) == answer["completion_tokens"]
        assert all(lp <= 0 for lp in turn["logprobs"])
        assert turn["prompt_token_ids"] is None
        assert turn["model"] == llm.model
    notice = missing_ids_notice(llm.chat_completions_url, "prompt token ids")
    assert capsys.readouterr().err.splitlines().count(notice) == 1


@pytest.mark.parametrize(
    ("prompt_ids", "completion_ids"),
    [
        ("not a list", ["a", {"x": 1}, None]),
        ([1, 2, "3"], [1.0]),
        ([True, False], [-1, 2]),
        ([[1]], 5),
    ],
)
def test_ids_that_are_not_token_ids_are_recorded_as_none(
    prompt_ids: object, completion_ids: object
) -> None:
    """A hostile or broken endpoint's ids are never passed on as tokens: a list holding
    anything but non-negative integers is ``None``, and the run says once that the endpoint
    gives no usable ids; logprobs that are not finite numbers are ``None`` one by one."""
    answer = {
        "model": "m",
        "prompt_token_ids": prompt_ids,
        "choices": [
            {
                "message": {"role": "assistant", "content": "Hi."},
                "finish_reason": "stop",
                "token_ids": completion_ids,
                "logprobs": {
                    "content": [
                        {"token": "a", "logprob": float("nan")},
                        {"token": "b", "logprob": "bad"},
                        {"token": "c", "logprob": -0.25},
                        {"token": "d", "logprob": 0},
                        7,
                    ]
                },
            }
        ],
    }
    turn = turn_of([{"role": "user", "content": "hi"}], answer)
    assert turn["prompt_token_ids"] is None and turn["completion_token_ids"] is None
    assert turn["logprobs"] == [None, None, -0.25, 0.0, None]
    assert missing_ids(turn) == "token ids"
    assert "answers without usable token ids" in missing_ids_notice("http://x/v1")
