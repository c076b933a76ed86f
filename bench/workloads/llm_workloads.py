"""The osmo-run side of the LLM-bound benchmarks: workflows that call the run's model.

Each makes the same calls as its floor in llm_floor.py. Frameworks are imported inside
``run()``, so a Harbor trial (which has neither) can import this module. Metrics carry
``t_start``/``t_end`` (``time.time()``) so the benchmark can tell run time from start-up.
"""

from __future__ import annotations

import time
from typing import Any

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput
from osmo_run.sdk.llm import chat_completion


def _output(ctx: AgentWorkflowContext, reply: Any, started: float) -> AgentWorkflowOutput:
    return AgentWorkflowOutput(
        messages=[*ctx.prompt, {"role": "assistant", "content": str(reply)}],
        metrics={"t_start": started, "t_end": time.time()},
    )


class ChatWorkflow(AgentWorkflow):
    """One ``chat_completion`` (settings: ``max_tokens``, default 4; ``temperature``)."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        started = time.time()
        settings = self.config.settings
        params: dict[str, Any] = {"max_tokens": settings.get("max_tokens", 4)}
        if "temperature" in settings:
            params["temperature"] = settings["temperature"]
        response = await chat_completion(ctx.prompt, **params)
        return _output(ctx, response["choices"][0]["message"].get("content"), started)


class ManyCallsWorkflow(AgentWorkflow):
    """``settings.calls`` (default 20) ``chat_completion`` calls, one after the other."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        started = time.time()
        reply = None
        for _ in range(int(self.config.settings.get("calls", 20))):
            response = await chat_completion(ctx.prompt, max_tokens=4)
            reply = response["choices"][0]["message"].get("content")
        return _output(ctx, reply, started)


_TOOLS: dict[str, Any] = {}


def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def _tool(framework: str) -> Any:
    """The ``add`` tool for ``framework``, built once per process (as the floor does)."""
    if framework not in _TOOLS:
        if framework == "agents":
            from agents import function_tool

            _TOOLS[framework] = function_tool(add)
        else:
            from strands import tool

            _TOOLS[framework] = tool(add)
    return _TOOLS[framework]


class AgentsWorkflow(AgentWorkflow):
    """The OpenAI Agents integration: ``Agent(model=rollout_model())`` and a
    ``RolloutSession``; with ``settings.tool_turns`` K, an ``add`` tool the stub calls K
    times before it answers."""

    async def run(self, ctx: AgentWorkflowContext) -> None:
        from agents import Agent, Runner

        from osmo_run.integrations.openai_agents import RolloutSession, rollout_model

        turns = int(self.config.settings.get("tool_turns", 0))
        agent = Agent(
            name="assistant",
            instructions="Answer.",
            model=rollout_model(),
            tools=[_tool("agents")] if turns else [],
        )
        await Runner.run(agent, ctx.prompt, session=RolloutSession(), max_turns=turns + 2)


class StrandsWorkflow(AgentWorkflow):
    """The Strands integration: a ``RolloutAgent`` for the row's prompt."""

    async def run(self, ctx: AgentWorkflowContext) -> None:
        from osmo_run.integrations.strands import RolloutAgent

        turns = int(self.config.settings.get("tool_turns", 0))
        await RolloutAgent(ctx.prompt, tools=[_tool("strands")] if turns else []).invoke_async()
