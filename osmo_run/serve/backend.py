"""What the serving run puts around the run's own backend and writer.

:class:`ServedBackend` tells the served rollouts when each starts, grades and stops, and
ends at once, as ``cancelled``, a rollout cancelled before it started (the runner records
it like any other). :class:`ServedWriter` adds ``served: true`` and the lease token's hash
to every line and masks each request's model key, learnt at admission.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from osmo_run.backends.base import (
    ExecutionBackend,
    ProgressListener,
    ProgressPhase,
    ResultCallback,
    deliver,
)
from osmo_run.run.writing.masking import SecretMask
from osmo_run.run.writing.output import OutputWriter
from osmo_run.sdk.rollout import AbandonHandler
from osmo_run.sdk.types import ErrorCategory, ExecutionRequest, ExecutionResult
from osmo_run.serve.rollouts import KeptAt, ServedRollouts


class ServedBackend(ExecutionBackend):
    """``inner`` (the run's backend) reporting to ``rollouts``. The runner's direct path
    (:meth:`run_rollout`) goes to ``inner``'s own, so a served rollout runs as
    ``osmo-run local`` runs a row (the local backend: its phases in the runner's worker,
    no task per phase)."""

    def __init__(self, inner: ExecutionBackend, rollouts: ServedRollouts) -> None:
        self.inner = inner
        self._rollouts = rollouts
        self.cancel_grace_sec = inner.cancel_grace_sec
        self.runs_code_in_caller = inner.runs_code_in_caller

    @property
    def max_concurrency(self) -> int:
        return self.inner.max_concurrency

    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None:
        reason = self._rollouts.gate.take(request.id)
        if reason is not None:
            cancelled = ExecutionResult.failure(request.id, ErrorCategory.CANCELLED, reason, None)
            if (pending := deliver(on_workflow_complete, cancelled)) is not None:
                await pending
            return
        self._rollouts.started(request.id)
        if request.id in self._rollouts.rerun_without_key:
            on_workflow_complete = _noting(on_workflow_complete, KEY_NOT_KEPT)
            if on_grader_complete is not None:
                on_grader_complete = _noting(on_grader_complete, KEY_NOT_KEPT)
        try:
            await self.inner.execute(request, on_workflow_complete, on_grader_complete)
        finally:
            self._rollouts.stopped(request.id)

    async def run_rollout(
        self, request: ExecutionRequest, on_abandon: AbandonHandler | None = None
    ) -> ExecutionResult:
        """``inner``'s direct path, told to the served rollouts as :meth:`execute` tells
        them; a rollout cancelled before it started ends at once as ``cancelled``."""
        reason = self._rollouts.gate.take(request.id)
        if reason is not None:
            return ExecutionResult.failure(request.id, ErrorCategory.CANCELLED, reason, None)
        noted = request.id in self._rollouts.rerun_without_key
        if noted and on_abandon is not None:
            on_abandon = _noting(on_abandon, KEY_NOT_KEPT)
        self._rollouts.started(request.id)
        try:
            result = await self.inner.run_rollout(request, on_abandon)
        finally:
            self._rollouts.stopped(request.id)
        if noted:
            _note(result, KEY_NOT_KEPT)
        return result

    def health(self) -> dict[str, Any]:
        return self.inner.health()

    def set_progress_listener(self, listener: ProgressListener | None) -> None:
        rollouts = self._rollouts

        def heard(rollout_id: str, phase: str) -> None:
            if phase in (ProgressPhase.GRADING, ProgressPhase.GRADER):
                rollouts.grading(rollout_id)
            if listener is not None:
                listener(rollout_id, phase)

        self.inner.set_progress_listener(heard)

    async def prepare(self) -> None:
        await self.inner.prepare()

    def setup_note(self) -> str:
        return self.inner.setup_note()

    async def aclose(self) -> None:
        await self.inner.aclose()


KEY_NOT_KEPT = (
    "ran again after a restart without the request's llm_api_key (keys are never written "
    "to disk); an endpoint that needs one refused it"
)


def _note(result: ExecutionResult, warning: str) -> None:
    """Add ``warning`` to ``result``'s warnings, once."""
    if warning not in result.warnings:
        result.warnings.append(warning)


Returned = TypeVar("Returned")


def _noting(
    callback: Callable[[ExecutionResult], Returned], warning: str
) -> Callable[[ExecutionResult], Returned]:
    """``callback`` (a result callback, an abandon handler) with ``warning`` added to the
    result it is handed."""

    def noted(result: ExecutionResult) -> Returned:
        _note(result, warning)
        return callback(result)

    return noted


class ServedWriter(OutputWriter):
    """The run's results file, each line marked ``served: true`` with its rollout's
    ``lease_sha256`` (looked up in ``rollouts``), and every request's model key masked
    (:meth:`add_secret`) as the run's own secrets are."""

    def __init__(self, path: Path, secrets: tuple[str, ...] = ()) -> None:
        super().__init__(path, secrets, turns=True)
        self._secrets = set(secrets)
        self.rollouts: ServedRollouts | None = None
        self._last_line: tuple[int, int] | None = None

    def write(self, line: str) -> None:
        start = self._size
        super().write(line)
        self._last_line = (start, self._size - start)

    def kept_at(self, with_turns: bool) -> KeptAt | None:
        """Where the results line written last is and, ``with_turns``, the turns line
        written last (:class:`~osmo_run.serve.rollouts.ResultLines`)."""
        if self._last_line is None:
            return None
        turns = self.turns.last_line if with_turns and self.turns is not None else None
        return KeptAt(*self._last_line, *(turns or (0, 0)))

    def read_back(self, kept: KeptAt) -> tuple[Any, Any]:
        """The record at ``kept`` and its turns (``None`` without a turns line): a result
        read again (:class:`~osmo_run.serve.rollouts.ResultLines`)."""
        record = json.loads(_read_line(self.path, kept.line_at, kept.line_len))
        turns = None
        if kept.turns_len and self.turns is not None:
            turns = json.loads(_read_line(self.turns.path, kept.turns_at, kept.turns_len))
            turns = turns["turns"]
        return record, turns

    def add_secret(self, secret: str) -> None:
        """Mask ``secret`` (in every form) in everything written from now on."""
        if secret and secret not in self._secrets:
            self._secrets.add(secret)
            self._mask = SecretMask(self._secrets)

    def record_line(self, record: dict[str, Any]) -> str:
        """The record's line (masked), with ``served``, ``lease_sha256``, ``request`` (the
        trainer's request without its prompt or key) and ``recorded_unix`` (now) added to a
        rollout's own record."""
        if self.rollouts is not None:
            rollout_id = str(record.get("rollout_id"))
            record = {
                **record,
                "served": True,
                "lease_sha256": self.rollouts.lease_digest(rollout_id),
                "request": self.rollouts.request_fields(rollout_id),
                "recorded_unix": round(time.time(), 3),
            }
        return super().record_line(record)


def _read_line(path: Path, offset: int, length: int) -> bytes:
    """The ``length`` bytes at ``offset`` of ``path``: one whole line, or ``ValueError``."""
    with open(path, "rb") as handle:
        data = os.pread(handle.fileno(), length, offset)
    if len(data) != length or not data.endswith(b"\n"):
        raise ValueError(f"{path.name} no longer holds the line at byte {offset}")
    return data
