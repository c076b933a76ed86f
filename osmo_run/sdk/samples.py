"""What ``run()`` returned, turned into the rollout's sample. Stdlib only.

``run()`` returns the conversation (a message list, or an :class:`AgentWorkflowOutput`
with messages), or ``None`` to leave it to the :class:`~osmo_run.sdk.context.SampleSource`
registered on the rollout context (how agent-framework integrations work). Anything else,
and ``None`` with no sample source, is a ``validation_error`` of the workflow: the grader
never sees a sample that does not exist.
"""

from __future__ import annotations

import inspect
from typing import Any

from osmo_run.sdk.context import RolloutContext
from osmo_run.sdk.types import AgentWorkflowOutput, RolloutSample

_WHAT_TO_RETURN = (
    "return the conversation (a list of messages, or AgentWorkflowOutput(messages=...)), "
    "or register a SampleSource (get_rollout_context().register_sample_source(...)) "
    "before returning None"
)


def check_messages(messages: object) -> list[dict[str, Any]]:
    """``messages`` if it is a list of dicts with a ``role``; ``TypeError`` otherwise."""
    if not isinstance(messages, list):
        raise TypeError(f"messages must be a list of dicts, got {type(messages).__name__}")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise TypeError(f"messages[{i}] must be a dict with a 'role', got {message!r:.80}")
    return messages


def sample_from_output(output: object) -> tuple[RolloutSample | None, dict[str, Any]]:
    """``(sample, info)`` for what ``run()`` returned; ``sample`` is ``None`` when it is to
    come from the sample source (:func:`sample_from_source`).

    Raises ``TypeError`` (a validation error of the workflow) for a return value that is not
    a sample. Metrics are taken as they are (see :mod:`osmo_run.sdk.telemetry`).
    """
    if isinstance(output, list):
        return RolloutSample(messages=check_messages(output)), {}
    if isinstance(output, AgentWorkflowOutput):
        info = dict(output.info) if isinstance(output.info, dict) else {"info": output.info}
        if output.messages is None:
            return None, info
        return RolloutSample(check_messages(output.messages), output.metrics), info
    if output is None:
        return None, {}
    raise TypeError(f"run() returned {type(output).__name__}; {_WHAT_TO_RETURN}")


async def sample_from_source(rollout: RolloutContext, output: object) -> RolloutSample:
    """The registered sample source's sample (awaited when ``get_sample`` is async), with
    the metrics of an ``AgentWorkflowOutput`` without messages merged into it.

    Raises ``ValueError``/``TypeError`` when no source is registered or it gives no sample.
    """
    if isinstance(output, AgentWorkflowOutput):
        sample = await _from_source(rollout, "AgentWorkflowOutput without messages")
        if isinstance(output.metrics, dict) and isinstance(sample.metrics, dict):
            sample.metrics = {**sample.metrics, **output.metrics}
        return sample
    return await _from_source(rollout, "None")


async def _from_source(rollout: RolloutContext, returned: str) -> RolloutSample:
    source = rollout.sample_source
    if source is None:
        raise ValueError(
            f"run() returned {returned} and no sample source is registered; {_WHAT_TO_RETURN}"
        )
    sample = source.get_sample()
    if inspect.isawaitable(sample):
        sample = await sample
    name = type(source).__name__
    if sample is None:
        raise ValueError(f"the sample source ({name}) returned no sample")
    if not isinstance(sample, RolloutSample):
        raise TypeError(
            f"the sample source ({name}) returned {type(sample).__name__}, not a RolloutSample"
        )
    check_messages(sample.messages)
    return sample
