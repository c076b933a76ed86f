"""Workflows for the embedded model's lifecycle tests, run by the real ``osmo-run``.

``ChatThenWorkflow`` asks the model once, then does what the row's metadata says:
``raise`` (a failed row), ``sleep`` (seconds, so a run can be interrupted mid-row, after
touching the file ``marker`` names) or ``kill`` (SIGKILL to osmo-run itself: a row that
crashes the whole process).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.llm import chat_completion


class ChatThenWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        response = await chat_completion(ctx.prompt, max_tokens=8, temperature=0.0)
        reply = {"role": "assistant", "content": response["choices"][0]["message"]["content"]}
        meta = ctx.metadata
        if meta.get("marker"):
            await asyncio.to_thread(Path(meta["marker"]).touch)
        if meta.get("raise"):
            raise RuntimeError("this row fails on purpose")
        if meta.get("kill"):
            os.kill(os.getpid(), signal.SIGKILL)
        if meta.get("sleep"):
            await asyncio.sleep(float(meta["sleep"]))
        return AgentWorkflowOutput(messages=[*ctx.prompt, reply])


class EndpointWorkflow(AgentWorkflow):
    """Asks the model once, at ``metadata.base_url`` when the row names one (another
    endpoint than the spec's: rows failing for different causes in one run), else at the
    spec's ``llm``."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        base_url = ctx.metadata.get("base_url")
        endpoint = LLMEndpoint(base_url, "stub-model") if base_url else None
        response = await chat_completion(ctx.prompt, endpoint=endpoint, max_tokens=8)
        reply = {"role": "assistant", "content": response["choices"][0]["message"]["content"]}
        return AgentWorkflowOutput(messages=[*ctx.prompt, reply])


class TurnsWorkflow(AgentWorkflow):
    """Asks the model ``metadata.turns`` times (default 3), one call after the other, each
    turn's reply in the next turn's messages; raises after ``metadata.raise_after`` calls."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        messages = list(ctx.prompt)
        for number in range(int(ctx.metadata.get("turns", 3))):
            if number == ctx.metadata.get("raise_after"):
                raise RuntimeError(f"fails after {number} calls, on purpose")
            response = await chat_completion(messages, max_tokens=8)
            content = response["choices"][0]["message"]["content"]
            messages += [
                {"role": "assistant", "content": content},
                {"role": "user", "content": "and?"},
            ]
        return AgentWorkflowOutput(messages=messages[:-1])
