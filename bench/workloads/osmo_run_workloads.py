"""The osmo-run side of the benchmarks: a no-op workflow, an exact-match grader, and a
workflow that sleeps 100 ms (the latency-bound workload)."""

from __future__ import annotations

import asyncio
import time

from osmo_run import AgentWorkflow, AgentWorkflowContext, AgentWorkflowOutput, Grader, GraderContext

ANSWER = "4"


class NoopWorkflow(AgentWorkflow):
    """Returns one assistant message; does nothing else."""

    async def run(self, ctx: AgentWorkflowContext) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": ANSWER}]


class ExactMatchGrader(Grader):
    """1.0 when the last message's content equals the label."""

    async def grade(self, ctx: GraderContext) -> float:
        assert ctx.sample is not None
        return 1.0 if ctx.sample.messages[-1]["content"] == str(ctx.label) else 0.0


class SleepWorkflow(AgentWorkflow):
    """Sleeps 100 ms (a model call), then answers; its metrics carry wall-clock start and end
    (time.time()) so the benchmark can tell run time from process start-up."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        started = time.time()
        await asyncio.sleep(0.1)
        return AgentWorkflowOutput(
            messages=[{"role": "assistant", "content": ANSWER}],
            metrics={"t_start": started, "t_end": time.time()},
        )
