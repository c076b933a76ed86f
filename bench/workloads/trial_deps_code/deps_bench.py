"""The workflow bench/trial_deps.py runs in Harbor trials: it imports the module named by
``settings.module`` inside ``run`` (so the row's ``workflow_sec`` holds the import) and
answers with where it came from."""

from __future__ import annotations

import importlib
import time

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput


class ImportWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        name = str(self.config.settings.get("module") or "json")
        started = time.perf_counter()
        module = importlib.import_module(name)
        seconds = time.perf_counter() - started
        reply = {"role": "assistant", "content": str(getattr(module, "__file__", name))}
        return AgentWorkflowOutput(messages=[*ctx.prompt, reply], metrics={"import_sec": seconds})
