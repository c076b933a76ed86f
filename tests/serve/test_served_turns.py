"""``osmo-run serve`` with ``llm.capture: tokens``: a finished rollout's answer carries its
captured turns (``turns``), exactly the ids the trainer's endpoint sent, its secrets
masked as in the turns file; ``osmo_run.client`` hands them over as ``result.turns``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from osmo_run.client import Rollout, ServeClient
from tests.llm.stub_model import StubModel, serve
from tests.serve.harness import serving

TURNS = "tests.llm.llm_workflows:TurnsWorkflow"


@pytest.fixture
def stub_model() -> Iterator[StubModel]:
    yield from serve(StubModel())


def test_a_finished_rollout_carries_its_turns_through_the_client(
    tmp_path: Path, stub_model: StubModel
) -> None:
    stub_model.token_ids = True
    key = "sk-served-secret-9191"

    async def scenario() -> None:
        async with serving(tmp_path, workflow=TURNS, grader=None, capture_tokens=True) as server:
            rollouts = [
                Rollout("with-key", [{"role": "user", "content": f"my key {key}"}],
                        stub_model.base_url, metadata={"turns": 2}, llm_api_key=key),
                Rollout("fails", [{"role": "user", "content": "hi"}], stub_model.base_url,
                        metadata={"raise_after": 1}),
            ]  # fmt: skip
            async with ServeClient(server.url) as client:
                results = {r.rollout_id: r async for r in client.run_batch(rollouts)}
            await server.recorded(2)

        with_key = results["with-key"]
        assert with_key.ok and with_key.turns is not None and len(with_key.turns) == 2
        assert with_key.turns[0]["messages"][0]["content"] == "my key ***"
        assert key not in json.dumps(with_key.answer)
        sent = {tuple(a["completion_token_ids"]) for a in stub_model.token_answers}
        assert {tuple(t["completion_token_ids"]) for t in with_key.turns} <= sent
        failed = results["fails"]
        assert not failed.ok and failed.turns is not None and len(failed.turns) == 1
        assert tuple(failed.turns[0]["completion_token_ids"]) in sent
        turns_file = tmp_path / "results.turns.jsonl"
        assert key not in turns_file.read_text()
        assert len(turns_file.read_text().splitlines()) == 2

    asyncio.run(scenario())


def test_without_capture_the_answer_has_no_turns(tmp_path: Path, stub_model: StubModel) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, workflow=TURNS, grader=None) as server:
            rollout = Rollout("r0", [{"role": "user", "content": "hi"}], stub_model.base_url,
                              metadata={"turns": 1})  # fmt: skip
            async with ServeClient(server.url) as client:
                result = await client.run(rollout)
        assert result.ok and result.turns is None and "turns" not in result.answer
        assert "return_token_ids" not in stub_model.requests[0].body

    asyncio.run(scenario())


def test_a_restarted_server_answers_again_with_the_turns_it_had(
    tmp_path: Path, stub_model: StubModel
) -> None:
    stub_model.token_ids = True

    async def scenario() -> None:
        body = {"url": stub_model.base_url, "metadata": {"turns": 2}}
        async with serving(tmp_path, workflow=TURNS, grader=None, capture_tokens=True) as first:
            token = await first.admitted("a", **body)
            answer = await first.final("a", token)
            quiet = await first.admitted("b", url=stub_model.base_url, metadata={"turns": 0})
            await first.final("b", quiet)
        assert len(answer["turns"]) == 2
        async with serving(
            tmp_path,
            workflow=TURNS,
            grader=None,
            capture_tokens=True,
            resume_from=first.results,
        ) as second:
            assert (await second.poll("a", token)).json() == answer
            assert (await second.poll("b", quiet)).json()["turns"] == []

    asyncio.run(scenario())
