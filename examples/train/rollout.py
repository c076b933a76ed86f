"""The rollout a GRPO-style trainer asks osmo-run serve for (examples/train/grpo.py): one
answer from the policy (the request's own model endpoint: the trainer's inference server)
and a reward for it. The policy version the trainer put in the request's metadata comes back
in the result (``sample.extra_fields``), so the trainer can tell which weights produced it."""

from __future__ import annotations

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput, Grader, GraderContext
from osmo_run.sdk.llm import chat_completion


class PolicyAnswer(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        response = await chat_completion(ctx.prompt, max_tokens=12, temperature=1.0)
        reply = {"role": "assistant", "content": response["choices"][0]["message"]["content"]}
        info = {"policy_version": ctx.metadata.get("policy_version")}
        return AgentWorkflowOutput(messages=[*ctx.prompt, reply], info=info)


class MentionsAnswer(Grader):
    """1.0 when the reply holds the label, else 0.0 (a small model's rewards vary)."""

    async def grade(self, ctx: GraderContext) -> float:
        assert ctx.sample is not None
        reply = str(ctx.sample.messages[-1].get("content") or "")
        return 1.0 if str(ctx.label).lower() in reply.lower() else 0.0
