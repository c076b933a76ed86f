"""The osmosis-ai 0.3.8 side: the same no-op workflow and exact-match grader, written
against osmosis_ai.rollout (imported only in bench/.venvs/osmosis)."""

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
