"""The two classes a workflow author subclasses."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.context import AgentWorkflowContext, GraderContext
from osmo_run.sdk.types import AgentWorkflowOutput, Message


class AgentWorkflow(ABC):
    """An agent rollout. A fresh instance runs each row.

    ``run`` may return a list of messages, an :class:`AgentWorkflowOutput`, or ``None``
    to leave the sample to the :class:`SampleSource` registered on the rollout context.
    Raising ends the rollout as a failure whose category follows the exception type.
    """

    def __init__(self, config: AgentWorkflowConfig | None = None) -> None:
        self.config = config if config is not None else AgentWorkflowConfig()

    @abstractmethod
    async def run(
        self, ctx: AgentWorkflowContext
    ) -> list[Message] | AgentWorkflowOutput | None: ...


class Grader(ABC):
    """Scores one rollout's sample against the row's label. A fresh instance grades each row.

    ``grade`` must call ``ctx.set_reward(x)`` (or return a number); returning without a
    reward is a ``validation_error``.
    """

    def __init__(self, config: GraderConfig | None = None) -> None:
        self.config = config if config is not None else GraderConfig()

    @classmethod  # noqa: B027 -- an optional hook: most graders accept any settings
    def validate_settings(cls, settings: dict[str, Any]) -> None:
        """Raise ``ValueError`` or ``TypeError`` naming the field when ``settings`` (the
        spec's ``grader_config.settings``) are invalid; the default accepts anything.

        osmo-run calls it once before any row runs, so bad settings stop the run with one
        error (exit 2) instead of failing every row.
        """

    @abstractmethod
    async def grade(self, ctx: GraderContext) -> float | None: ...
