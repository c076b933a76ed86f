"""A Strands agent with a tool, run as an osmo-run workflow.

The agent talks to the run's model endpoint (``ctx.llm``; ``configs/agents-strands.yaml``
uses the embedded model) and is the rollout's sample: a
:class:`~osmo_run.integrations.strands.RolloutAgent` registers itself. Needs
``pip install 'osmo-run[strands]'``.
"""

from __future__ import annotations

from strands import tool
from strands.types.exceptions import MaxTokensReachedException

from osmo_run import AgentWorkflow, AgentWorkflowContext
from osmo_run.integrations.strands import RolloutAgent, rollout_model

SYSTEM_PROMPT = (
    "You are a careful assistant. To add numbers, call the add tool; then answer in one "
    "short sentence."
)


@tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


class StrandsWorkflow(AgentWorkflow):
    """One agent invocation per row; the sample is the agent's conversation.

    ``workflow_config.settings``: ``temperature``, ``max_tokens``.
    """

    async def run(self, ctx: AgentWorkflowContext) -> None:
        settings = self.config.settings
        params = {
            "temperature": settings.get("temperature", 0.0),
            "max_tokens": settings.get("max_tokens", 64),
        }
        agent = RolloutAgent(
            ctx.prompt,  # the row's chat prompt; its system messages join the system prompt
            system_prompt=SYSTEM_PROMPT,
            tools=[add],
            model=rollout_model(params=params),
        )
        try:
            await agent.invoke_async()
        except MaxTokensReachedException:
            pass  # the truncated answer is in the conversation: let the grader judge it
