"""A row whose synchronous code blocks the shared event loop stays one row: it is blamed
(and told the cure), and the rows it held up keep their full deadlines."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from osmo_run import (
    AgentWorkflowConfig,
    ConcurrencyConfig,
    ErrorCategory,
    ExecutionResult,
    Phase,
    RolloutStatus,
)
from osmo_run.backends.local import LocalBackend
from tests.conftest import CLI, make_request, read_jsonl
from tests.workflows import ScriptedGrader, ScriptedWorkflow

BLOCK_SEC = 2.5
DEADLINE_SEC = 1.0


def _run_together(requests: list[Any], grader: Any = None) -> dict[str, ExecutionResult]:
    """Start every request at once, in order, on one LocalBackend; the final results."""
    results: dict[str, ExecutionResult] = {}

    async def main() -> None:
        backend = LocalBackend(
            ScriptedWorkflow, AgentWorkflowConfig(ConcurrencyConfig(8)), grader=grader
        )
        try:
            tasks = []
            for request in requests:
                tasks.append(
                    asyncio.create_task(
                        backend.execute(request, lambda r: results.__setitem__(r.rollout_id, r))
                    )
                )
                await asyncio.sleep(0.05)  # the polite rows are waiting when the blocker starts
            await asyncio.gather(*tasks)
        finally:
            await backend.aclose()

    asyncio.run(main())
    return results


def test_the_row_that_blocks_the_loop_times_out_and_the_rows_it_held_up_succeed() -> None:
    results = _run_together(
        [
            make_request({"sleep": 0.3}, agent_sec=DEADLINE_SEC, row_id="polite"),
            make_request({"sleep": 0.05}, agent_sec=DEADLINE_SEC, row_id="quick"),
            make_request({"block": BLOCK_SEC}, agent_sec=DEADLINE_SEC, row_id="blocker"),
        ]
    )
    blocker = results["blocker"]
    assert (blocker.status, blocker.error_category, blocker.error_phase) == (
        RolloutStatus.FAILURE,
        ErrorCategory.TIMEOUT,
        Phase.WORKFLOW,
    )
    message = blocker.error_message or ""
    assert "its synchronous code blocked the event loop for" in message
    assert "--isolation process" in message
    for row in ("polite", "quick"):
        assert results[row].status is RolloutStatus.SUCCESS, results[row].error_message
        (warning,) = results[row].warnings
        assert "while the event loop was blocked" in warning and "'blocker'" in warning


def test_a_row_blocking_only_briefly_within_its_deadline_hurts_no_one() -> None:
    results = _run_together(
        [
            make_request({"sleep": 0.2}, agent_sec=5, row_id="polite"),
            make_request({"block": 0.5}, agent_sec=5, row_id="brief"),
        ]
    )
    assert results["brief"].status is RolloutStatus.SUCCESS
    assert results["polite"].status is RolloutStatus.SUCCESS
    assert results["polite"].warnings == []  # it finished within its deadline anyway


def test_a_grader_that_blocks_the_loop_is_blamed_not_the_workflows_around_it() -> None:
    results = _run_together(
        [
            make_request({"sleep": 0.3}, agent_sec=DEADLINE_SEC, row_id="polite"),
            make_request(
                {"grade": f"block:{BLOCK_SEC}"},
                agent_sec=DEADLINE_SEC,
                grader_sec=DEADLINE_SEC,
                row_id="blocking-grader",
            ),
        ],
        grader=ScriptedGrader,
    )
    graded = results["blocking-grader"]
    assert (graded.error_category, graded.error_phase) == (ErrorCategory.TIMEOUT, Phase.GRADER)
    assert "--isolation process" in (graded.error_message or "")
    assert graded.sample is not None and graded.sample.messages  # the workflow's sample stays
    assert results["polite"].status is RolloutStatus.SUCCESS, results["polite"].error_message
    assert results["polite"].reward == 1.0


def test_a_run_records_the_blocker_as_the_one_failure(cli: CLI, tmp_path: Path) -> None:
    """The README's promise end to end: ``osmo-run local`` with a row that calls
    ``time.sleep`` past its deadline among rows that only await."""
    rows = [
        {"id": "polite", "prompt": "x", "metadata": {"sleep": 0.3}},
        {"id": "blocker", "prompt": "x", "metadata": {"sleep": 0.1, "block": BLOCK_SEC}},
        {"id": "patient", "prompt": "x", "metadata": {"sleep": 0.6}},
    ]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    proc = cli.local(
        data,
        "--workflow",
        "tests.workflows:ScriptedWorkflow",
        "--agent-timeout",
        str(DEADLINE_SEC),
        "--display",
        "plain",
        "-o",
        "out.jsonl",
    )
    assert proc.returncode == 1, proc.stderr
    records = {r["row_id"]: r for r in read_jsonl(tmp_path / "out.jsonl")}
    assert records["blocker"]["error_category"] == "timeout"
    assert "--isolation process" in records["blocker"]["error_message"]
    assert records["polite"]["status"] == "success"
    assert records["patient"]["status"] == "success"


def test_a_row_blocking_just_past_its_deadline_is_the_timeout_every_time() -> None:
    """A stall just past the threshold (0.15 s against a 0.05 s deadline) once had no owner
    and excused the very row that caused it; the row that blocks is always the timeout,
    whether or not the watchdog saw it (a stall nobody saw excuses no one)."""
    for _ in range(3):
        results = _run_together([make_request({"block": 0.15}, agent_sec=0.05, row_id="blocker")])
        blocker = results["blocker"]
        assert (blocker.error_category, blocker.error_phase) == (
            ErrorCategory.TIMEOUT,
            Phase.WORKFLOW,
        ), (blocker.status, blocker.warnings)
