"""The osmosis-ai 0.3.8 side: the same no-op workflow, exact-match grader and one-call chat
workflow, written against osmosis_ai.rollout (imported only in bench/.venvs/osmosis)."""

from __future__ import annotations

from typing import Any

from osmosis_ai.rollout import AgentWorkflow, Grader
from osmosis_ai.rollout.context import AgentWorkflowContext, GraderContext

ANSWER = "4"


class NoopWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext[Any]) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": ANSWER}]


class ExactMatchGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"] == str(ctx.label) else 0.0)


_HTTP: list[Any] = []


class ChatWorkflow(AgentWorkflow):
    """One chat call to the rollout's model endpoint (what osmo-run's ``ChatWorkflow`` in
    llm_workloads.py makes), through one shared httpx client with no connection cap."""

    async def run(self, ctx: AgentWorkflowContext[Any]) -> list[dict[str, Any]]:
        import httpx
        from osmosis_ai.rollout.context import get_rollout_context

        if not _HTTP:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            _HTTP.append(httpx.AsyncClient(timeout=600, limits=limits))
        rollout = get_rollout_context()
        assert rollout is not None
        response = await _HTTP[0].post(
            rollout.chat_completions_url.rstrip("/") + "/chat/completions",
            json={"model": "osmosis-rollout", "messages": ctx.prompt, "max_tokens": 4},
        )
        response.raise_for_status()
        reply = response.json()["choices"][0]["message"].get("content")
        return [*ctx.prompt, {"role": "assistant", "content": str(reply)}]
