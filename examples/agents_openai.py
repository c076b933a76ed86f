"""An OpenAI Agents SDK agent with a tool, run as an osmo-run workflow.

The agent talks to the run's model endpoint (``ctx.llm``; ``configs/agents-openai.yaml``
uses the embedded model) and its conversation becomes the rollout's sample through
:class:`~osmo_run.integrations.openai_agents.RolloutSession`. Needs
``pip install 'osmo-run[openai-agents]'``.
"""

from __future__ import annotations

from agents import Agent, ModelSettings, Runner, function_tool

from osmo_run import AgentWorkflow, AgentWorkflowContext
from osmo_run.integrations.openai_agents import RolloutSession, rollout_model

INSTRUCTIONS = (
    "You are a careful assistant. To add numbers, call the add tool; then answer in one "
    "short sentence."
)


@function_tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


class AgentsWorkflow(AgentWorkflow):
    """One agent run per row; the sample is the session's conversation.

    ``workflow_config.settings``: ``temperature``, ``max_tokens``, ``max_turns``.
    """

    async def run(self, ctx: AgentWorkflowContext) -> None:
        settings = self.config.settings
        agent = Agent(
            name="assistant",
            instructions=INSTRUCTIONS,
            tools=[add],
            model=rollout_model(),
            model_settings=ModelSettings(
                temperature=settings.get("temperature", 0.0),
                max_tokens=settings.get("max_tokens", 64),
            ),
        )
        session = RolloutSession()  # registers itself as this rollout's sample source
        await Runner.run(agent, ctx.prompt, session=session, max_turns=settings.get("max_turns", 4))
