"""Workflows and graders that misbehave in the ways issue 7 lists, driven by metadata."""

from __future__ import annotations

import os
import time

from osmo_run import AgentWorkflow, AgentWorkflowContext, Grader, GraderContext, Message


class MisbehavingWorkflow(AgentWorkflow):
    """``metadata.do``: ``block`` (time.sleep forever), ``exit`` (os._exit(3)), ``big``
    (a 50 MB reply), ``echo`` (the prompt back), ``key`` (the API key's length), else
    ``ok``."""

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        action = ctx.metadata.get("do")
        if action == "block":
            time.sleep(10_000)
        if action == "exit":
            os._exit(3)
        if action == "big":
            return [{"role": "assistant", "content": "x" * (50 * 1024 * 1024)}]
        if action == "echo":
            return [{"role": "assistant", "content": ctx.prompt[-1]["content"]}]
        if action == "key":
            key = ctx.llm.api_key if ctx.llm else None
            return [{"role": "assistant", "content": f"key length {len(key or '')}"}]
        return [{"role": "assistant", "content": "ok"}]


class BlockingGrader(Grader):
    """Blocks the event loop forever when the label is ``block``; else reward 1.0."""

    async def grade(self, ctx: GraderContext) -> float:
        if ctx.label == "block":
            time.sleep(10_000)
        return 1.0
