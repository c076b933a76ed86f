"""Workflows for the hostile-input tests: they fail quoting what the row gave them, as a
careless tool's error would."""

from __future__ import annotations

import os

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput, Grader, GraderContext


class QuotingWorkflow(AgentWorkflow):
    """Fails with an error quoting the row's prompt (its last message's text) and its
    metadata's ``detail`` on a second line; with ``ok`` in the metadata, answers with the
    prompt instead, and puts it into a metric name and ``info`` too."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        prompt = str(ctx.prompt[-1].get("content"))
        if ctx.metadata.get("ok"):
            reply = {"role": "assistant", "content": prompt}
            return AgentWorkflowOutput(
                [*ctx.prompt, reply], metrics={f"m {prompt}": 1.0}, info={prompt: prompt}
            )
        raise ValueError(f"cannot answer {prompt}\n{ctx.metadata.get('detail', '')}")


class TokenQuotingGrader(Grader):
    """Fails quoting ``OSMO_RUN_TEST_TOOL_TOKEN`` from the environment (an env file's)."""

    async def grade(self, ctx: GraderContext) -> float | None:
        raise RuntimeError(f"grader's tool refused {os.environ['OSMO_RUN_TEST_TOOL_TOKEN']}")
