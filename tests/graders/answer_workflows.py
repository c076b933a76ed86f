"""Workflows for the graders' CLI tests: one answers with the row's ``metadata.answer``,
one asks the run's model; and users' graders: one with settings of its own, one that
asks the judge model itself."""

from __future__ import annotations

from typing import Any

from osmo_run import AgentWorkflow, AgentWorkflowContext, Grader, GraderContext, Message
from osmo_run.sdk.llm import chat_completion


class AnswerWorkflow(AgentWorkflow):
    """Replies with ``metadata["answer"]``, as a model would have."""

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        return [*ctx.prompt, {"role": "assistant", "content": str(ctx.metadata["answer"])}]


class PickyGrader(Grader):
    """A user's grader with settings of its own: ``settings.mode`` must be ``strict`` or
    ``lenient``. It explains, then raises on rows whose ``metadata.explode`` is set."""

    @classmethod
    def validate_settings(cls, settings: dict[str, Any]) -> None:
        if settings.get("mode") not in ("strict", "lenient"):
            raise ValueError(f"mode must be 'strict' or 'lenient', got {settings.get('mode')!r}")

    async def grade(self, ctx: GraderContext) -> float:
        ctx.explain("looked at the answer", mode=self.config.settings["mode"])
        if ctx.metadata.get("explode"):
            raise RuntimeError("the grader broke after explaining")
        return 1.0


class ModelAnswerWorkflow(AgentWorkflow):
    """Replies with what the run's model (``llm``) answers to the prompt."""

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        response = await chat_completion(ctx.prompt, ctx.llm)
        reply = response["choices"][0]["message"]["content"]
        return [*ctx.prompt, {"role": "assistant", "content": reply}]


class AskJudgeGrader(Grader):
    """A user's grader that asks the spec's judge (``chat_completion`` without an endpoint,
    in the grader phase) whether the answer is right: reward 1.0 when it says ``yes``. It
    explains with the judge's API key, which the output must mask."""

    async def grade(self, ctx: GraderContext) -> float:
        assert ctx.sample is not None
        question = [
            {"role": "user", "content": f"Is {ctx.sample.messages[-1]['content']!r} right?"}
        ]
        response = await chat_completion(question)
        reply = str(response["choices"][0]["message"]["content"])
        key = ctx.judge.api_key if ctx.judge is not None else None
        ctx.explain(f"the judge said {reply!r}", key_seen=key)
        return 1.0 if "yes" in reply.lower() else 0.0
