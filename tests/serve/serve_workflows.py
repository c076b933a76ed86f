"""Workflows the serve tests run: ones that touch the rollout's own model endpoint."""

from __future__ import annotations

import sys

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput


class KeyQuotingWorkflow(AgentWorkflow):
    """Prints the rollout's model key, writes it into an info field and its reply, and, with
    ``metadata.fail``, fails with it in a multi-line error: everything a careless workflow
    could do with a secret it was handed."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        assert ctx.llm is not None
        key = ctx.llm.api_key
        print(f"calling {ctx.llm.base_url} with {key}", file=sys.stderr)
        if ctx.metadata.get("fail"):
            raise RuntimeError(f"the endpoint refused {key}\nheaders: Authorization: Bearer {key}")
        reply = {"role": "assistant", "content": f"my key is {key}"}
        return AgentWorkflowOutput([*ctx.prompt, reply], info={"key": key, "url": ctx.llm.base_url})
