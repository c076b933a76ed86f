"""A workflow for the graders' CLI tests: it answers with the row's ``metadata.answer``."""

from __future__ import annotations

from osmo_run import AgentWorkflow, AgentWorkflowContext, Message


class AnswerWorkflow(AgentWorkflow):
    """Replies with ``metadata["answer"]``, as a model would have."""

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        return [*ctx.prompt, {"role": "assistant", "content": str(ctx.metadata["answer"])}]
