"""One rollout contract, run against every backend (``backends/base.py``): the same rows
through ``LocalBackend`` in process, ``LocalBackend(isolation="process")`` and
``HarborBackend`` in real Docker trials.

Each backend runs every row of :data:`ROWS` once, all at once (a module-scoped fixture: a
handful of Harbor trials in total); the tests read what the callbacks received, as the
runner (or osmosis-ai) would:

* ``on_workflow_complete`` and ``on_grader_complete``, plain or ``async def``, are each
  called exactly once: ``GRADING`` then the final result for a graded row, the final
  result alone through ``on_workflow_complete`` for a row that is not graded;
* a workflow's warning reaches the final result once;
* a workflow failure keeps its category and phase, and is not graded;
* a grader failure keeps the workflow's sample;
* a row whose code blocks past its deadline is a timeout of its workflow phase;
* every phase a backend reports to its progress listener is one it declares.

The workflow and grader are ``tests/harbor/harbor_workflows.py`` (stdlib only: they run in
the trial's Python too), with ``tests/harbor`` as the code directory on every backend.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from osmo_run import (
    AgentWorkflowConfig,
    ConcurrencyConfig,
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    Phase,
    RolloutStatus,
)
from osmo_run.backends.base import ExecutionBackend
from osmo_run.backends.local import LocalBackend

HARBOR_TESTS = Path(__file__).resolve().parents[1] / "harbor"
"""The code directory: ``harbor_workflows`` (the workflow and grader) lives there."""
CALCULATOR_TASK = HARBOR_TESTS.parents[1] / "tasks" / "calculator"
WORKFLOW = "harbor_workflows:ScriptedWorkflow"
GRADER = "harbor_workflows:ScriptedGrader"
DEADLINE_SEC = 30.0
"""The deadline of every row but the late one: never reached."""


@dataclass(frozen=True)
class Row:
    """One row of the contract run: its metadata, its workflow deadline, and whether its
    callbacks are ``async def``."""

    metadata: dict[str, Any]
    agent_sec: float = DEADLINE_SEC
    async_callbacks: bool = False


ROWS = {
    "graded-sync": Row({"workflow": "nan_metric"}),
    "graded-async": Row({"workflow": "nan_metric"}, async_callbacks=True),
    "workflow-fails": Row({"workflow": "raise"}, async_callbacks=True),
    "grader-fails": Row({"grader": "raise_runtime"}),
    # blocks its loop 0.15 s against a 0.05 s deadline: a stall just past the threshold
    # in process, a phase returning late in a child process or a trial
    "late": Row({"workflow": "stall", "stall_sec": 0.15}, agent_sec=0.05, async_callbacks=True),
}


@dataclass
class Delivered:
    """What one row's callbacks received, in order: ``(callback, status, result)``, the
    result copied when it was handed over (a later change to it does not show here)."""

    calls: list[tuple[str, RolloutStatus, ExecutionResult]] = field(default_factory=list)

    @property
    def sequence(self) -> list[tuple[str, RolloutStatus]]:
        return [(callback, status) for callback, status, _ in self.calls]

    @property
    def final(self) -> ExecutionResult:
        return self.calls[-1][2]


@dataclass
class ContractRun:
    """What one backend's run of :data:`ROWS` left."""

    delivered: dict[str, Delivered]
    phases: dict[str, list[str]]
    declared: tuple[str, ...]


def _callback(delivered: Delivered, name: str, is_async: bool) -> Callable[..., Any]:
    """A plain or ``async def`` callback recording into ``delivered`` as ``name``; the async
    one records only once awaited past a suspension, as a real one would do its work."""

    def record(result: ExecutionResult) -> None:
        copy = ExecutionResult.from_dict(result.to_dict())
        delivered.calls.append((name, result.status, copy))

    if not is_async:
        return record

    async def record_when_awaited(result: ExecutionResult) -> None:
        status, copy = result.status, ExecutionResult.from_dict(result.to_dict())
        await asyncio.sleep(0)
        delivered.calls.append((name, status, copy))

    return record_when_awaited


def _request(row_id: str, row: Row) -> ExecutionRequest:
    return ExecutionRequest(
        id=row_id,
        prompt=[{"role": "user", "content": "What is 6 * 7?"}],
        label="42",
        metadata=row.metadata,
        agent_timeout_sec=row.agent_sec,
        grader_timeout_sec=DEADLINE_SEC,
    )


def _docker_problem() -> str | None:
    from tests.harbor.conftest import _docker_problem as problem  # the harbor tests' gate

    return problem()


def _backend(kind: str, directory: Path) -> ExecutionBackend:
    config = AgentWorkflowConfig(ConcurrencyConfig(len(ROWS)))
    if kind == "local":
        return LocalBackend(WORKFLOW, config, GRADER)
    if kind == "process":
        return LocalBackend(WORKFLOW, config, GRADER, isolation="process", code_dir=HARBOR_TESTS)
    assert kind == "harbor"
    problem = _docker_problem()
    if problem is not None:
        if os.environ.get("OSMO_RUN_REQUIRE_DOCKER") == "1":
            pytest.fail(f"OSMO_RUN_REQUIRE_DOCKER=1 but {problem}", pytrace=False)
        pytest.skip(problem)
    pytest.importorskip("harbor")
    from osmo_run.backends.harbor import HarborBackend

    return HarborBackend(
        task_dir=CALCULATOR_TASK,
        user_code_dir=HARBOR_TESTS,
        workflow=WORKFLOW,
        workflow_config=config,
        grader=GRADER,
        trials_dir=directory / "trials",
        run_dir=directory,
        run_id=f"contract-{uuid.uuid4().hex[:8]}",
    )


async def _run_rows(backend: ExecutionBackend) -> ContractRun:
    delivered: dict[str, Delivered] = defaultdict(Delivered)
    phases: dict[str, list[str]] = defaultdict(list)
    backend.set_progress_listener(lambda row_id, phase: phases[row_id].append(phase))
    try:
        await backend.prepare()
        calls: list[Awaitable[None]] = []
        for row_id, row in ROWS.items():
            mine = delivered[row_id]
            calls.append(
                backend.execute(
                    _request(row_id, row),
                    _callback(mine, "workflow", row.async_callbacks),
                    _callback(mine, "grader", row.async_callbacks),
                )
            )
        await asyncio.gather(*calls)
    finally:
        await backend.aclose()
    return ContractRun(dict(delivered), dict(phases), backend.progress_phases)


@pytest.fixture(scope="module")
def contract_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ContractRun]:
    """Every row of :data:`ROWS` through the backend ``request.param`` names."""
    kind = str(request.param)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(HARBOR_TESTS))  # the host resolves the classes too
        backend = _backend(kind, tmp_path_factory.mktemp(f"contract-{kind}"))
        yield asyncio.run(_run_rows(backend))
    sys.modules.pop("harbor_workflows", None)


HARBOR = pytest.param("harbor", marks=[pytest.mark.docker, pytest.mark.slow], id="harbor")
BACKENDS = ["local", "process", HARBOR]
each_backend = pytest.mark.parametrize("contract_run", BACKENDS, indirect=True)


@each_backend
def test_a_graded_row_is_delivered_grading_then_final_once_each(
    contract_run: ContractRun,
) -> None:
    for row_id in ("graded-sync", "graded-async"):  # plain callbacks, then async ones
        delivered = contract_run.delivered[row_id]
        assert delivered.sequence == [
            ("workflow", RolloutStatus.GRADING),
            ("grader", RolloutStatus.SUCCESS),
        ], row_id
        final = delivered.final
        assert final.reward == 1.0 and final.sample is not None, row_id
        assert final.sample.messages[-1]["content"] == "42"


@pytest.mark.parametrize(
    "contract_run",
    [
        "local",
        "process",
        HARBOR,
    ],
    indirect=True,
)
def test_a_workflow_warning_reaches_the_final_result_once(contract_run: ContractRun) -> None:
    for row_id in ("graded-sync", "graded-async"):
        warnings = contract_run.delivered[row_id].final.warnings
        assert len(warnings) == 1, (row_id, warnings)
        assert "score" in warnings[0], (row_id, warnings)


@each_backend
def test_a_workflow_failure_keeps_its_category_and_phase_and_is_not_graded(
    contract_run: ContractRun,
) -> None:
    delivered = contract_run.delivered["workflow-fails"]
    assert delivered.sequence == [("workflow", RolloutStatus.FAILURE)]
    final = delivered.final
    assert (final.error_category, final.error_phase) == (ErrorCategory.AGENT_ERROR, Phase.WORKFLOW)
    assert "failed on purpose" in (final.error_message or "")


@each_backend
def test_a_grader_failure_keeps_the_workflows_sample(contract_run: ContractRun) -> None:
    delivered = contract_run.delivered["grader-fails"]
    assert delivered.sequence == [
        ("workflow", RolloutStatus.GRADING),
        ("grader", RolloutStatus.FAILURE),
    ]
    final = delivered.final
    assert final.error_phase is Phase.GRADER
    assert "failed on purpose" in (final.error_message or "")
    assert final.sample is not None and final.sample.messages[-1]["content"] == "42"
    assert final.reward is None


@each_backend
def test_a_row_blocking_past_its_deadline_is_a_timeout_of_its_workflow(
    contract_run: ContractRun,
) -> None:
    delivered = contract_run.delivered["late"]
    assert delivered.sequence == [("workflow", RolloutStatus.FAILURE)]
    final = delivered.final
    assert (final.error_category, final.error_phase) == (ErrorCategory.TIMEOUT, Phase.WORKFLOW)
    assert "blocked the event loop" in (final.error_message or "")


@each_backend
def test_every_phase_reported_is_one_the_backend_declares(contract_run: ContractRun) -> None:
    reported = {phase for phases in contract_run.phases.values() for phase in phases}
    assert reported <= set(contract_run.declared), (reported, contract_run.declared)
    for row_id in ("graded-sync", "graded-async", "grader-fails"):  # every phase, in order
        phases = contract_run.phases[row_id]
        assert phases == sorted(phases, key=contract_run.declared.index), (row_id, phases)
        assert len(phases) >= 2, (row_id, phases)
