"""Workflows and graders the tests run: by class in process, or as ``tests.workflows:Name``
with the repository root as the code dir (``--code-dir`` / ``code_dir``).

``ScriptedWorkflow`` and ``ScriptedGrader`` do what a row's metadata tells them, so one
dataset can exercise many behaviours in one CLI run.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from pathlib import Path
from typing import Any, ClassVar

from osmo_run import (
    AgentWorkflow,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    Grader,
    GraderContext,
    Message,
    RolloutSample,
    get_rollout_context,
)


class RateLimitError(Exception):
    """Named like openai's exception: categorized as rate_limit by its name."""


class APIConnectionError(Exception):
    """Named like openai's exception: categorized as model_api_error by its name."""


ERRORS: dict[str, type[BaseException]] = {
    "TimeoutError": TimeoutError,
    "ValueError": ValueError,
    "TypeError": TypeError,
    "AssertionError": AssertionError,
    "RuntimeError": RuntimeError,
    "KeyError": KeyError,
    "ZeroDivisionError": ZeroDivisionError,
    "RateLimitError": RateLimitError,
    "APIConnectionError": APIConnectionError,
}


def reply(ctx: AgentWorkflowContext, content: str) -> list[Message]:
    return [*ctx.prompt, {"role": "assistant", "content": content}]


def last_content(ctx: AgentWorkflowContext) -> str:
    return str(ctx.prompt[-1].get("content", ""))


class NoopWorkflow(AgentWorkflow):
    """Returns an empty conversation at once (throughput and memory tests)."""

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        return []


class EchoWorkflow(AgentWorkflow):
    """Answers with the prompt's last message, or, for a row without a prompt, with the
    prompt it builds from ``metadata.question`` (a metadata-only row); ``info`` says how
    many prompt messages and characters it was given, and its metadata's keys."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        if ctx.prompt:
            messages = reply(ctx, last_content(ctx))
        else:
            built = [{"role": "user", "content": str(ctx.metadata.get("question", ""))}]
            messages = [*built, {"role": "assistant", "content": built[0]["content"]}]
        chars = sum(len(str(m.get("content", ""))) for m in ctx.prompt)
        info = {"prompt_messages": len(ctx.prompt), "prompt_chars": chars}
        return AgentWorkflowOutput(messages, info={**info, "metadata": sorted(ctx.metadata)})


class ScriptedWorkflow(AgentWorkflow):
    """Follows the row's metadata, in this order:

    ``sleep`` (await that many seconds), ``block`` (``time.sleep``, blocking the loop),
    ``raise`` (a name in :data:`ERRORS`), ``raise_env`` (raise with that variable's value),
    ``reply_env`` (answer with that variable's value),
    ``returns`` (``messages`` default, ``output``, ``none``, ``output_without_messages``,
    ``str``, ``nan_info``, ``nan_message``, ``bad_metrics``).
    """

    async def run(self, ctx: AgentWorkflowContext) -> Any:
        meta = ctx.metadata
        if "sleep" in meta:
            await asyncio.sleep(meta["sleep"])
        if "block" in meta:
            time.sleep(meta["block"])
        if "raise" in meta:
            raise ERRORS[meta["raise"]](f"scripted {meta['raise']}")
        if "raise_env" in meta:
            raise RuntimeError(f"the server refused {os.environ[meta['raise_env']]}")
        content = os.environ[meta["reply_env"]] if "reply_env" in meta else last_content(ctx)
        messages = reply(ctx, content)
        returns = meta.get("returns", "messages")
        if returns == "messages":
            return messages
        if returns == "output":
            return AgentWorkflowOutput(messages, metrics={"turns": 1}, info={"note": "hi"})
        if returns == "none":
            return None
        if returns == "output_without_messages":
            return AgentWorkflowOutput(metrics={"turns": 1})
        if returns == "str":
            return "a string is not a sample"
        if returns == "nan_info":
            return AgentWorkflowOutput(messages, info={"score": math.nan})
        if returns == "nan_message":
            return [*messages, {"role": "tool", "content": math.nan}]
        if returns == "bad_metrics":
            return AgentWorkflowOutput(messages, metrics={"turns": "one"})  # type: ignore[dict-item]
        raise AssertionError(f"unknown returns {returns!r}")


class ScriptedGrader(Grader):
    """Reward 1.0 when the label appears in the last message, else 0.0; the row's
    ``metadata.grade`` changes that: ``none`` (no reward), ``nan``, ``set`` (set_reward(0.25)
    and return None), ``raise:<Name>``, ``sleep:<sec>``, ``block:<sec>`` (``time.sleep``)."""

    async def grade(self, ctx: GraderContext) -> float | None:
        how = str(ctx.metadata.get("grade", ""))
        if how == "none":
            return None
        if how == "nan":
            return math.nan
        if how == "set":
            ctx.set_reward(0.25)
            return None
        if how.startswith("raise:"):
            name = how.split(":", 1)[1]
            raise ERRORS[name](f"grader scripted {name}")
        if how.startswith("sleep:"):
            await asyncio.sleep(float(how.split(":", 1)[1]))
        if how.startswith("block:"):
            time.sleep(float(how.split(":", 1)[1]))
        assert ctx.sample is not None
        final = str(ctx.sample.messages[-1].get("content", "")) if ctx.sample.messages else ""
        return 1.0 if str(ctx.label) in final else 0.0


class SlowWorkflow(AgentWorkflow):
    """Sleeps 30 s (interrupt tests: rows stay in flight)."""

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        print(f"started {ctx.rollout_id}", flush=True)
        await asyncio.sleep(30)
        return reply(ctx, "slept")


class StubbornWorkflow(AgentWorkflow):
    """Swallows every cancellation and keeps going for ``metadata.stubborn_sec`` (default 30)
    or until :attr:`release` is set."""

    release: ClassVar[bool] = False

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        print(f"started {ctx.rollout_id}", flush=True)
        until = time.monotonic() + float(ctx.metadata.get("stubborn_sec", 30))
        while time.monotonic() < until and not StubbornWorkflow.release:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                pass
        return reply(ctx, "finally done")


class StubbornGrader(Grader):
    """A grader that swallows cancellation until :attr:`StubbornWorkflow.release`."""

    async def grade(self, ctx: GraderContext) -> float:
        while not StubbornWorkflow.release:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                pass
        return 1.0


class ListSource:
    """A :class:`~osmo_run.SampleSource` holding fixed messages, as a framework would."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages

    def get_sample(self) -> RolloutSample | None:
        return RolloutSample(messages=self.messages, metrics={"from_source": 1})


class SourceWorkflow(AgentWorkflow):
    """Registers a sample source and returns None."""

    async def run(self, ctx: AgentWorkflowContext) -> None:
        get_rollout_context().register_sample_source(ListSource(reply(ctx, "from source")))
        return None


class DoubleSourceWorkflow(AgentWorkflow):
    """Registers two sample sources; the second registration raises."""

    async def run(self, ctx: AgentWorkflowContext) -> None:
        rollout = get_rollout_context()
        rollout.register_sample_source(ListSource([]))
        rollout.register_sample_source(ListSource([]))


class ConcurrencyProbe(AgentWorkflow):
    """Counts how many runs are inside ``run`` at once (class-level, reset by the test)."""

    running: ClassVar[int] = 0
    peak: ClassVar[int] = 0

    @classmethod
    def reset(cls) -> None:
        cls.running = 0
        cls.peak = 0

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        cls = ConcurrencyProbe
        cls.running += 1
        cls.peak = max(cls.peak, cls.running)
        try:
            await asyncio.sleep(0.02)
        finally:
            cls.running -= 1
        return reply(ctx, "probed")


class LabelGrader(Grader):
    """Reward 1.0 when the label appears in the last message, else 0.0."""

    async def grade(self, ctx: GraderContext) -> float:
        assert ctx.sample is not None
        return 1.0 if str(ctx.label) in str(ctx.sample.messages[-1].get("content")) else 0.0


class NotAWorkflow:
    """Has a run method but does not subclass AgentWorkflow."""

    async def run(self, ctx: Any) -> list[Message]:
        return []


class AbstractWorkflow(AgentWorkflow):
    """Subclasses AgentWorkflow but forgets run()."""


class ConfigMutatingWorkflow(AgentWorkflow):
    """Appends to its config's settings and reports how many entries it saw: 1 when every
    row gets its own copy of the config."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        seen = self.config.settings.setdefault("seen", [])
        seen.append(ctx.rollout_id)
        return AgentWorkflowOutput(reply(ctx, "mutated"), metrics={"seen": len(seen)})


class ArtifactWorkflow(AgentWorkflow):
    """Writes ``note.txt`` into the rollout's artifacts directory."""

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        assert ctx.artifacts_dir is not None
        (ctx.artifacts_dir / "note.txt").write_text(f"note of {ctx.rollout_id}")
        return reply(ctx, "wrote a note")


class ArtifactGrader(Grader):
    """Reward 1.0 when the workflow's ``note.txt`` is in the shared artifacts directory."""

    async def grade(self, ctx: GraderContext) -> float:
        assert ctx.artifacts_dir is not None
        note = ctx.artifacts_dir / "note.txt"
        return 1.0 if note.read_text() == f"note of {ctx.rollout_id}" else 0.0


class BlockingCleanupWorkflow(AgentWorkflow):
    """Sleeps 30 s; when cancelled, cleans up synchronously for 5 s, blocking the loop."""

    async def run(self, ctx: AgentWorkflowContext) -> list[Message]:
        print(f"started {ctx.rollout_id}", flush=True)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            time.sleep(5)
            raise
        return reply(ctx, "slept")


def record_call(calls_dir: str, rollout_id: str) -> int:
    """Append this call's time to ``<calls_dir>/<rollout_id>``; return how many calls that
    rollout has seen, this one included (the file survives the process: resume tests)."""
    path = Path(calls_dir) / rollout_id
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{time.time()}\n")
    return len(path.read_text(encoding="utf-8").splitlines())


class CountingWorkflow(ScriptedWorkflow):
    """Counts its calls per rollout in ``metadata.calls`` (a directory, see
    :func:`record_call`), then:

    ``sleep_first`` (await that many seconds on the first call only), ``fail_first`` and
    ``fail_with`` (raise ``fail_with``, a name in :data:`ERRORS`, on the first
    ``fail_first`` calls), and then whatever :class:`ScriptedWorkflow` does.
    """

    async def run(self, ctx: AgentWorkflowContext) -> Any:
        meta = ctx.metadata
        call = record_call(meta["calls"], ctx.rollout_id) if "calls" in meta else 1
        if call == 1 and "sleep_first" in meta:
            await asyncio.sleep(meta["sleep_first"])
        if call <= int(meta.get("fail_first", 0)):
            name = meta.get("fail_with", "RuntimeError")
            raise ERRORS[name](f"scripted {name} on call {call}")
        return await super().run(ctx)


class MkdirWorkflow(ScriptedWorkflow):
    """Creates the directory ``metadata.mkdir`` (a report path taken from under osmo-run
    while the run goes), then does what :class:`ScriptedWorkflow` does."""

    async def run(self, ctx: AgentWorkflowContext) -> Any:
        await asyncio.to_thread(Path(ctx.metadata["mkdir"]).mkdir, parents=True, exist_ok=True)
        return await super().run(ctx)


class SampleGrader(Grader):
    """Passes (1.0) the samples whose index is below ``metadata.passes``, fails (0.0) the
    rest: a row with ``passes: c`` and N samples has exactly c passing samples."""

    async def grade(self, ctx: GraderContext) -> float:
        _, _, index = ctx.rollout_id.rpartition("~")
        sample = int(index) if index.isdigit() else 0
        return 1.0 if sample < int(ctx.metadata.get("passes", 0)) else 0.0


class MetadataGrader(Grader):
    """Reward ``metadata[key]``, the key named by ``config.settings.key`` (default
    ``reward``): two graders over one dataset that disagree on chosen rows."""

    async def grade(self, ctx: GraderContext) -> float:
        key = str(ctx.config.settings.get("key", "reward"))
        return float(ctx.metadata[key])


class PrintingWorkflow(ScriptedWorkflow):
    """Prints a line to stdout (as debugging workflows do), then does what
    :class:`ScriptedWorkflow` does: ``--json`` must keep stdout for its one JSON object."""

    async def run(self, ctx: AgentWorkflowContext) -> Any:
        print(f"workflow says hello from {ctx.rollout_id}", flush=True)
        return await super().run(ctx)


class MetadataEchoWorkflow(AgentWorkflow):
    """Answers with the row's metadata as JSON (``json.dumps`` refuses what is not JSON), and
    puts it in ``info``: what a workflow in a worker process or a trial was given."""

    async def run(self, ctx: AgentWorkflowContext) -> AgentWorkflowOutput:
        text = json.dumps(ctx.metadata, sort_keys=True)
        return AgentWorkflowOutput(reply(ctx, text), info={"metadata": ctx.metadata})
