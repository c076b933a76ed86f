"""A workflow for the ``--env-file`` tests: one model call through the spec's endpoint (whose
key the env file holds), and a metric saying whether another variable of the file reached it
(the value itself never goes into the sample)."""

from __future__ import annotations

import os

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput
from osmo_run.sdk.llm import chat_completion


class EnvChatWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        response = await chat_completion(ctx.prompt, max_tokens=8)
        reply = {"role": "assistant", "content": response["choices"][0]["message"]["content"]}
        greeting = os.environ.get("OSMO_RUN_TEST_GREETING") == "hello from the env file"
        return AgentWorkflowOutput(messages=[*ctx.prompt, reply], metrics={"greeting": greeting})


class LeakyToolWorkflow(AgentWorkflow):
    """Fails quoting a tool's token from the environment, as a careless HTTP client's error
    would: the run must mask it everywhere it writes and shows."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        token = os.environ["OSMO_RUN_TEST_TOOL_TOKEN"]
        print(f"calling the tool with {token}")
        raise RuntimeError(f"tool refused token {token}")
