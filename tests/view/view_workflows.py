"""The workflow and grader the viewer's tests run through ``osmo-run local``: a conversation
with a tool call and its result, model usage, artifact files (text and a PNG), rewards
taken from the row, and failures of several categories, all steered by a row's metadata.

``metadata.say`` is what the assistant answers (the markup payload rows put HTML there,
another Markdown), ``metadata.reasoning`` its reasoning (``None`` otherwise, as SDKs write
it), ``metadata.long_tool`` the number of lines of its tool result (one otherwise),
``metadata.fail`` names an exception to raise (``RateLimitError`` is categorized by its
name), ``metadata.reward`` is the grader's reward. The spec's settings make a second run of
the same dataset differ: workflow ``settings.fail`` lists row ids that raise ``RuntimeError``,
grader ``settings.rewards`` maps row ids to other rewards.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

from osmo_run import (
    AgentWorkflow,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    Grader,
    GraderContext,
    get_rollout_context,
)


class RateLimitError(Exception):
    """Named like openai's exception: categorized as ``rate_limit``."""


FAILURES: dict[str, type[BaseException]] = {
    "ValueError": ValueError,
    "RuntimeError": RuntimeError,
    "TimeoutError": TimeoutError,
    "RateLimitError": RateLimitError,
}


def tiny_png(width: int = 4, height: int = 4) -> bytes:
    """A valid red PNG image, built with zlib (the row page shows it as an image)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


class TranscriptWorkflow(AgentWorkflow):
    """Answers with one calculator tool call, its result and a final message."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        meta: dict[str, Any] = ctx.metadata
        if ctx.rollout_id in self.config.settings.get("fail", []):
            raise RuntimeError(f"{ctx.rollout_id} fails in this run")
        if "fail" in meta:
            raise FAILURES[str(meta["fail"])](str(meta.get("message", f"scripted {meta['fail']}")))
        get_rollout_context().record_llm_call(100 + len(ctx.rollout_id), 20, 0.05)
        get_rollout_context().record_llm_call(120, 10, 0.02)
        answer = str(meta.get("say", "The answer is 4."))
        call_id = f"call_{ctx.rollout_id}"
        messages = [
            *ctx.prompt,
            {
                "role": "assistant",
                "content": "Let me use the calculator.",
                "reasoning_content": meta.get("reasoning"),
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "calculator",
                            "arguments": json.dumps({"expression": "2+2"}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "name": "calculator",
                "content": "\n".join(f"line {i}" for i in range(meta["long_tool"]))
                if meta.get("long_tool")
                else "4",
            },
            {"role": "assistant", "content": answer},
        ]
        if meta.get("artifacts"):
            (ctx.artifacts_dir / "notes.txt").write_text(f"notes of {ctx.rollout_id}\n")
            (ctx.artifacts_dir / "plot.png").write_bytes(tiny_png())
        return AgentWorkflowOutput(messages, metrics={"tool_calls": 1.0, "turns": 2.0})


class RewardGrader(Grader):
    """``settings.rewards[row id]``, else the row's ``metadata.reward`` (default 1.0)."""

    async def grade(self, ctx: GraderContext) -> float:
        rewards = self.config.settings.get("rewards", {})
        if ctx.rollout_id in rewards:
            reward = float(rewards[ctx.rollout_id])
        else:
            reward = float(ctx.metadata.get("reward", 1.0))
        verdict = "the answer matches the label" if reward >= 1 else "the answer is not the label"
        ctx.explain(f"{verdict}: reward {reward:g}", label=ctx.label)
        return reward
