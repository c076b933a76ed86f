"""A workflow whose module takes 2.5 s to import (a heavy dependency), then answers after
awaiting 0.9 s: within a 1 s deadline once it runs."""

from __future__ import annotations

import asyncio
import time

from osmo_run import AgentWorkflow, AgentWorkflowContext, Message

time.sleep(2.5)


class SlowImportWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        await asyncio.sleep(0.9)
        return [{"role": "assistant", "content": "loaded slowly, answered in time"}]
