"""The workflow and grader the harbor tests run inside real trial containers.

Imported as ``harbor_workflows:Name`` with ``tests/harbor`` as the code dir (the backend
copies that directory into every trial). It runs on the container's Python 3.11 with
nothing but the osmo-run SDK, so: stdlib only.

Both classes do what a row's metadata tells them, so one dataset exercises many
behaviours in one run:

``metadata.workflow``
    ``answer`` (default) answers ``metadata.answer`` (default ``"42"``);
    ``raise`` raises ``RuntimeError``; ``sleep`` awaits ``metadata.sleep_sec``;
    ``block`` blocks the event loop forever with ``time.sleep``;
    ``stall`` blocks it for ``metadata.stall_sec`` with ``time.sleep``, then answers;
    ``nan_metric`` answers with a NaN metric ``score`` (dropped, with a warning);
    ``key`` reports ``len(get_rollout_context().llm.api_key)`` as the metric ``key_len``
    and, with ``metadata.chat``, answers what the spec's model endpoint replies;
    ``where`` reports the working directory and ``marker.txt`` in ``info``;
    ``storm`` makes ``metadata.calls`` model calls at once (``asyncio.gather``; one after
    the other with ``metadata.serial``) and answers the first one's reply.
``metadata.grader``
    ``match`` (default) gives 1.0 when the answer equals the label, else 0.0;
    ``raise_value`` raises ``ValueError``; ``raise_runtime`` raises ``RuntimeError``;
    ``sleep`` awaits ``metadata.sleep_sec`` first.

Every successful workflow also records ``started_at``/``ended_at`` (epoch seconds, the
host's clock: containers share it) so tests can measure how many rows ran at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

from osmo_run import (
    AgentWorkflow,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    Grader,
    GraderContext,
    get_rollout_context,
)
from osmo_run.sdk.llm import chat_completion


def _read_marker() -> str:
    marker = Path("marker.txt")
    return marker.read_text().strip() if marker.is_file() else ""


class ScriptedWorkflow(AgentWorkflow):
    """Does what ``metadata.workflow`` says (see the module docstring)."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        started = time.time()
        action = ctx.metadata.get("workflow", "answer")
        metrics: dict[str, float] = {}
        info: dict[str, str] = {}
        answer = str(ctx.metadata.get("answer", "42"))
        if action == "raise":
            raise RuntimeError("the scripted workflow failed on purpose")
        if action == "sleep":
            await asyncio.sleep(float(ctx.metadata.get("sleep_sec", 1.0)))
        elif action == "block":
            time.sleep(10**6)  # blocks the event loop: only a kill from outside ends it
        elif action == "stall":
            time.sleep(float(ctx.metadata.get("stall_sec", 0.15)))
        elif action == "nan_metric":
            metrics["score"] = math.nan
        elif action == "key":
            llm = get_rollout_context().llm
            key = llm.api_key if llm is not None else None
            metrics["key_len"] = len(key) if key else -1
            if ctx.metadata.get("chat"):
                response = await chat_completion(ctx.prompt, timeout_sec=10)
                answer = str(response["choices"][0]["message"]["content"])
        elif action == "storm":
            calls = int(ctx.metadata.get("calls", 30))
            if ctx.metadata.get("serial"):  # one after the other
                replies = [await chat_completion(ctx.prompt, timeout_sec=60) for _ in range(calls)]
            else:
                replies = await asyncio.gather(
                    *(chat_completion(ctx.prompt, timeout_sec=60) for _ in range(calls))
                )
            answer = str(replies[0]["choices"][0]["message"]["content"])
            metrics["calls"] = float(len(replies))
        elif action == "where":
            info["cwd"] = str(Path.cwd())
            info["marker"] = await asyncio.to_thread(_read_marker)
        answer_file = self.config.settings.get("answer_file")
        if answer_file:
            await asyncio.to_thread(Path(answer_file).write_text, answer + "\n")
        metrics["started_at"] = started
        metrics["ended_at"] = time.time()
        messages = [*ctx.prompt, {"role": "assistant", "content": answer}]
        return AgentWorkflowOutput(messages=messages, metrics=metrics, info=info)


class ScriptedGrader(Grader):
    """Does what ``metadata.grader`` says (see the module docstring)."""

    async def grade(self, ctx: GraderContext) -> float:
        action = ctx.metadata.get("grader", "match")
        if action == "raise_value":
            raise ValueError("the scripted grader cannot read this label")
        if action == "raise_runtime":
            raise RuntimeError("the scripted grader failed on purpose")
        if action == "sleep":
            await asyncio.sleep(float(ctx.metadata.get("sleep_sec", 1.0)))
        assert ctx.sample is not None
        answer = str(ctx.sample.messages[-1].get("content"))
        return 1.0 if answer == str(ctx.label) else 0.0
