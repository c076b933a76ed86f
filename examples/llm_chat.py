"""A one-turn chat workflow against the spec's OpenAI-compatible endpoint, and a grader
that looks for the label in the reply."""

from __future__ import annotations

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput, Grader, GraderContext
from osmo_run.sdk.llm import chat_completion


class ChatWorkflow(AgentWorkflow):
    """Sends the row's messages to the model once and records the reply and why it ended.

    ``workflow_config.settings`` may set ``temperature`` and ``max_tokens``. Token usage
    needs no code: ``chat_completion`` counts it in the output row's ``usage``.
    """

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        settings = self.config.settings
        response = await chat_completion(
            ctx.prompt,
            temperature=settings.get("temperature", 0.0),
            max_tokens=settings.get("max_tokens", 128),
        )
        message = response["choices"][0]["message"]
        reply = {"role": "assistant", "content": message.get("content") or ""}
        finish = response["choices"][0].get("finish_reason")
        return AgentWorkflowOutput(messages=[*ctx.prompt, reply], info={"finish_reason": finish})


class ContainsLabelGrader(Grader):
    """Reward 1.0 when the label (as text, case-insensitive) appears in the final reply."""

    async def grade(self, ctx: GraderContext) -> float:
        assert ctx.sample is not None and ctx.sample.messages, "the workflow produced no messages"
        reply = str(ctx.sample.messages[-1].get("content") or "")
        return 1.0 if str(ctx.label).strip().lower() in reply.lower() else 0.0
