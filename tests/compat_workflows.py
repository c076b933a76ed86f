"""Workflows, sample sources and graders written the way osmosis-ai code is written: async
sample sources, rewards assigned to the sample, numpy telemetry, ``remove_sample``.

Each does what the row's metadata says (``tests.compat_workflows:Name`` with the repository
root as the code dir), so one dataset exercises several behaviours in one CLI run.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from osmo_run import (
    AgentWorkflow,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    Grader,
    GraderContext,
    RolloutSample,
    get_rollout_context,
)


class AsyncSource:
    """A sample source whose ``get_sample`` is a coroutine (osmosis-ai's ``SampleSource``).

    ``reward`` (metadata ``source_reward``) is put on the sample, as an osmosis-ai source
    may; ``remove`` sets ``remove_sample``.
    """

    def __init__(self, messages: list[dict[str, Any]], reward: Any, remove: bool) -> None:
        self.messages = messages
        self.reward = reward
        self.remove = remove

    async def get_sample(self) -> RolloutSample:
        sample = RolloutSample(messages=self.messages, metrics={"source": 1})
        sample.remove_sample = self.remove
        if self.reward is not None:
            sample.reward = self.reward  # validated here, where it is set
        return sample


def _telemetry(kind: str) -> dict[str, Any]:
    if kind == "numpy":
        return {"loss": np.float32(0.25), "steps": np.int64(3), "solved": np.bool_(True)}
    if kind == "nan":
        return {"loss": math.nan, "steps": 2}
    return {}


class CompatWorkflow(AgentWorkflow):
    """Registers an :class:`AsyncSource` and returns ``None`` (metadata ``source_reward``,
    ``remove``), or returns its conversation with the metrics and info ``telemetry`` names
    (``numpy``, ``nan``); ``artifact`` writes a note into ``ctx.artifacts_dir`` when there is
    one and says which in the reply."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput | None:
        meta = ctx.metadata
        reply = {"role": "assistant", "content": str(ctx.prompt[-1]["content"])}
        if meta.get("artifact"):
            directory = ctx.artifacts_dir
            if directory is not None:
                (directory / "note.txt").write_text("note")
            reply["content"] = "no artifacts dir" if directory is None else "wrote a note"
        messages = [*ctx.prompt, reply]
        if "telemetry" in meta:
            telemetry = _telemetry(str(meta["telemetry"]))
            return AgentWorkflowOutput(messages, metrics=telemetry, info={"raw": telemetry})
        if meta.get("source", True):
            source = AsyncSource(messages, meta.get("source_reward"), bool(meta.get("remove")))
            get_rollout_context().register_sample_source(source)
            return None
        return AgentWorkflowOutput(messages)


class CompatGrader(Grader):
    """Reports its reward as the row's metadata ``grade`` says: ``assign:X`` sets
    ``ctx.sample.reward = X``; ``set:X`` calls ``ctx.set_reward(X)``; ``set:X,return:Y``
    does both; ``return:X`` returns it; ``metric_nan`` sets the reward 1.0 then a NaN metric;
    ``remove`` sets ``remove_sample``; ``numpy`` returns ``np.float32(0.5)``; ``label`` scores
    1.0 when ``ctx.label`` is ``None``; ``big`` returns ``10**400``. Numbers are parsed
    with ``float``, other text is assigned as is."""

    async def grade(self, ctx: GraderContext) -> Any:
        assert ctx.sample is not None
        returned: Any = None
        for step in str(ctx.metadata.get("grade", "")).split(","):
            how, _, value = step.partition(":")
            number = _number(value)
            if how == "assign":
                ctx.sample.reward = number
            elif how == "set":
                ctx.set_reward(number)
            elif how == "return":
                returned = number
            elif how == "metric_nan":
                ctx.set_reward(1.0)
                ctx.sample.metrics["score"] = math.nan
            elif how == "remove":
                ctx.sample.remove_sample = True
            elif how == "numpy":
                returned = np.float32(0.5)
            elif how == "label":
                returned = 1.0 if ctx.label is None else 0.0
            elif how == "big":
                returned = 10**400
        return returned


def _number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text
