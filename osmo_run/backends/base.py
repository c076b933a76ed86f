"""The contract every execution backend implements."""

from __future__ import annotations

import enum
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

from osmo_run.sdk.deadlines import INTERRUPT_GRACE_SEC
from osmo_run.sdk.types import ErrorCategory, ExecutionRequest, ExecutionResult, RolloutStatus

__all__ = ["ExecutionBackend", "ProgressListener", "ProgressPhase", "ResultCallback", "deliver"]

ResultCallback = Callable[[ExecutionResult], Awaitable[Any] | Any]
"""Receives a rollout's result: ``on_workflow_complete`` and ``on_grader_complete``. A plain
function or an ``async def`` (osmosis-ai's callbacks are async): backends call it through
:func:`deliver`, which awaits what it returns when that is awaitable."""


def deliver(callback: ResultCallback, result: ExecutionResult) -> Awaitable[Any] | None:
    """Hand ``result`` to ``callback``; what the caller must await (an async callback's
    coroutine), or ``None`` for a plain callback: ``if (done := deliver(cb, r)): await done``.
    Plain callbacks cost no coroutine, which matters at tens of thousands of rows a second."""
    returned = callback(result)
    if returned is not None and inspect.isawaitable(returned):
        return returned
    return None


class ProgressPhase(enum.StrEnum):
    """The phases every backend's rollouts go through, as the live display names them. A
    backend reports finer ones of its own (:attr:`ExecutionBackend.progress_phases`)."""

    QUEUED = "queued"
    """Dispatched, waiting for a slot in the backend (the runner sets it)."""
    WORKFLOW = "workflow"
    GRADING = "grading"
    """The workflow finished; the grader is about to run (the runner sets it)."""
    GRADER = "grader"


ProgressListener = Callable[[str, str], None]
"""Called as ``listener(rollout_id, phase)`` when a rollout enters a phase, for the display;
``phase`` is one of the backend's :attr:`~ExecutionBackend.progress_phases`, shown as is."""


class ExecutionBackend(ABC):
    """Runs one :class:`ExecutionRequest` at a time per call; callers run many concurrently.

    Contract of :meth:`execute`:

    * ``on_workflow_complete(result)`` is called exactly once, when the workflow phase
      ends. Its ``status`` is ``GRADING`` when a grader runs next, otherwise terminal.
    * ``on_grader_complete(result)`` is called exactly once with the final result when
      the grader ran. When the caller passes ``None``, the backend grades anyway and
      delivers the final result through ``on_workflow_complete`` alone (called once).
    * Either callback may be ``async``; the backend awaits it (:func:`deliver`).
    * Failures of the rollout are results, not exceptions. ``execute`` raises only when the
      caller cancels it (``asyncio.CancelledError``) or on a bug in the backend.
    """

    _progress: ProgressListener | None = None
    progress_phases: tuple[str, ...] = (ProgressPhase.WORKFLOW, ProgressPhase.GRADER)
    """The phase names this backend reports to its progress listener, in the order a
    rollout goes through them (a backend with finer phases declares its own)."""
    cancel_grace_sec: float = INTERRUPT_GRACE_SEC
    """How long the runner waits for cancelled rows to wind down after an interrupt."""
    runs_code_in_caller: bool = False
    """Whether :meth:`run_rollout` runs the rollout's own code in the calling task (code
    that may ignore cancellation): the runner then waits only ``CANCEL_GRACE_SEC`` for it
    after an interrupt, as for a deadline."""

    @abstractmethod
    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None: ...

    async def run_rollout(
        self,
        request: ExecutionRequest,
        on_abandon: Callable[[ExecutionResult], None] | None = None,
    ) -> ExecutionResult:
        """The final result of ``request``: the runner's direct path, without callbacks.

        The caller keeps at most :attr:`max_concurrency` calls in flight (any number when it
        is ``0``). ``on_abandon``: a backend that runs the rollout's code in the calling
        task may hand on the timeout result of a phase that ignored cancellation there and
        then end the task with :class:`~osmo_run.sdk.phase_deadline.PhaseAbandoned`; others
        ignore it. This default runs :meth:`execute` and returns the result it delivered
        (reporting ``GRADING`` to the progress listener); a backend that delivers none gets
        an ``internal_error`` result saying so, and an exception raised after the result was
        delivered is ignored.
        """
        final: list[ExecutionResult] = []

        def on_workflow_complete(result: ExecutionResult) -> None:
            if result.status is RolloutStatus.GRADING:
                self._report_progress(request.id, ProgressPhase.GRADING)
            elif not final:
                final.append(result)

        def on_grader_complete(result: ExecutionResult) -> None:
            if not final:
                final.append(result)

        try:
            await self.execute(request, on_workflow_complete, on_grader_complete)
        except Exception:
            if not final:
                raise
        if final:
            return final[0]
        message = "the backend returned without a result (a backend bug)"
        return ExecutionResult.failure(request.id, ErrorCategory.INTERNAL_ERROR, message)

    @property
    @abstractmethod
    def max_concurrency(self) -> int:
        """How many ``execute`` calls make progress at once; ``0`` means no limit."""

    @property
    def model_calls_ceiling(self) -> int:
        """The most model calls the run's rows may have in flight to one endpoint: what an
        adaptive limit never grows past (:class:`~osmo_run.sdk.model_limits.ModelLimits`).
        One call per row in flight by default."""
        return self.max_concurrency

    def health(self) -> dict[str, Any]:
        """Backend health and load for humans and monitors; at least ``{"status": ...}``."""
        return {"status": "ok"}

    def set_progress_listener(self, listener: ProgressListener | None) -> None:
        """Receive phase changes of in-flight rollouts (optional for backends to report)."""
        self._progress = listener

    def _report_progress(self, rollout_id: str, phase: str) -> None:
        if self._progress is not None:
            self._progress(rollout_id, phase)

    async def prepare(self) -> None:  # noqa: B027 -- optional hook; most backends need none
        """Check the environment and build shared resources before any row runs.

        Raises :class:`~osmo_run.errors.OsmoRunError` when the backend cannot run rows.
        """

    def setup_note(self) -> str:
        """What :meth:`prepare` set up that the run's first line should say (``""``: none)."""
        return ""

    async def aclose(self) -> None:  # noqa: B027 -- optional hook; most backends hold nothing
        """Release what the backend holds (images, servers). Called once when a run ends."""
