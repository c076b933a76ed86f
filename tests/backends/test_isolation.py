"""``--isolation process``: a child that does not return is killed at its deadline, plus
the small, documented margin a child that met its deadline needs to write its result."""

from __future__ import annotations

import asyncio
from pathlib import Path

from osmo_run import ErrorCategory, ExecutionResult, Phase
from osmo_run.backends.local import LocalBackend
from osmo_run.sdk.deadlines import PROCESS_KILL_MARGIN_SEC
from tests.conftest import REPO, make_request

DEADLINE_SEC = 1.0
SLACK_SEC = 1.0
"""How late a timer may fire on a loaded 2-core machine."""


def _isolated(workflow: str, metadata: dict[str, object], tmp_path: Path) -> ExecutionResult:
    results: list[ExecutionResult] = []

    async def main() -> None:
        backend = LocalBackend(
            workflow, isolation="process", code_dir=REPO, artifacts_root=tmp_path
        )
        try:
            await backend.execute(make_request(metadata, agent_sec=DEADLINE_SEC), results.append)
        finally:
            await backend.aclose()

    asyncio.run(main())
    return results[-1]


def test_a_child_that_never_returns_is_killed_right_after_its_deadline(tmp_path: Path) -> None:
    result = _isolated(
        "tests.faults.fault_workflows:MisbehavingWorkflow", {"do": "block"}, tmp_path
    )
    assert (result.error_category, result.error_phase) == (ErrorCategory.TIMEOUT, Phase.WORKFLOW)
    assert result.error_message == (
        f"workflow did not return within its {DEADLINE_SEC:g}s deadline (agent_timeout_sec); "
        f"its process was killed {PROCESS_KILL_MARGIN_SEC:g}s after the deadline"
    )
    seconds = result.timings.workflow_sec
    assert seconds is not None
    assert DEADLINE_SEC + PROCESS_KILL_MARGIN_SEC <= seconds < DEADLINE_SEC + 0.5 + SLACK_SEC


def test_a_child_is_not_charged_for_loading_its_code(tmp_path: Path) -> None:
    """The deadline counts from the phase's start, as for rows in one process, whose code
    is imported once before any row runs: a 2.5 s import does not eat a 1 s deadline."""
    result = _isolated("tests.faults.slow_import_workflow:SlowImportWorkflow", {}, tmp_path)
    assert result.ok, result.error_message
    assert result.sample is not None
    assert result.sample.messages[-1]["content"] == "loaded slowly, answered in time"
