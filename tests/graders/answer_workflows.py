"""A workflow for the graders' CLI tests, which answers with the row's
``metadata.answer``, and a user's grader with settings of its own."""

from __future__ import annotations

from typing import Any

from osmo_run import AgentWorkflow, AgentWorkflowContext, Grader, GraderContext, Message


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
