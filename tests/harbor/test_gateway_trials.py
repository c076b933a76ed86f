"""Model calls from Harbor trials (real Docker) through the run's model gateway: the
endpoint's adaptive limit holds them, the run counts their 429s, and a budget stops them.

Each row's workflow (``storm`` in ``harbor_workflows.py``) fires many chat completions at
once from its container against the rate-limited stub (``tests/llm/slot_stub.py``) on the
host's loopback; the stub's counts are what the endpoint saw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from osmo_run.errors import ExitCode  # noqa: E402
from tests.harbor.conftest import HarborRun, harbor_spec, run_harbor  # noqa: E402
from tests.llm.slot_stub import SlotStub, serve_slots  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SLOTS = 8
TRIALS = 3
CALLS = 30
"""Calls each trial makes at once: 90 in all against 8 slots."""


def _storm(tmp_path: Path, stub: SlotStub, rows: int, *args: str, **llm: Any) -> HarborRun:
    spec = harbor_spec(
        llm={"base_url": stub.base_url, "model": "stub-model", **llm},
        concurrency=TRIALS,
        timeouts={"agent_sec": 120, "grader_sec": 30},
    )
    data = [
        {
            "id": f"s{i}",
            "prompt": "hello",
            "label": "Hi.",
            "metadata": {"workflow": "storm", "calls": CALLS},
        }
        for i in range(rows)
    ]
    return run_harbor(tmp_path, data, spec, *args, timeout=600)


def _limit(done: HarborRun) -> dict[str, Any]:
    (limit,) = done.summary["model_limits"]
    assert isinstance(limit, dict)
    return limit


def test_trials_calls_are_held_under_the_endpoints_slots_with_bounded_429s(
    tmp_path: Path,
) -> None:
    # 50 ms a call: answered before the limit's clocked start (0.1 s) would count a call
    # still in flight as accepted, so the start grows on answers (see ACCEPTED_AFTER_SEC)
    with serve_slots(SlotStub(slots=SLOTS, delay_sec=0.05)) as stub:
        adaptive = _storm(tmp_path / "adaptive", stub, TRIALS)
        adaptive_throttled = stub.throttled
        stub.throttled = 0
        fixed = _storm(tmp_path / "fixed", stub, TRIALS, max_concurrency=200)
        fixed_throttled = stub.throttled
    assert adaptive.returncode == 0, adaptive.stdout + adaptive.stderr
    assert [row["status"] for row in adaptive.rows.values()] == ["success"] * TRIALS
    calls = TRIALS * CALLS
    # Twice the endpoint's slots while the limit finds them, then a 429 as it probes
    # again: at most one call in 10 on an endpoint of 8 slots (a clean-clone CI drew 23
    # of 90 at 100 ms a call, past a bound of one in 20).
    assert adaptive_throttled <= 2 * SLOTS + calls // 10, adaptive_throttled
    limit = _limit(adaptive)
    assert limit["mode"] == "adaptive" and limit["throttled"] == adaptive_throttled
    assert limit["calls"] >= calls
    # llm.max_concurrency: 200 lets all 90 calls go at once: the storm the limit prevents
    # (counted by the run as the endpoint counted it)
    assert fixed_throttled > 2 * SLOTS + calls // 10, fixed_throttled
    assert _limit(fixed)["throttled"] == fixed_throttled
    print(f"429s: adaptive {adaptive_throttled}, fixed 200 {fixed_throttled} of {calls} calls")


def test_a_token_budget_stops_the_trials_calls_and_the_rows_after_them(tmp_path: Path) -> None:
    """300 tokens at 15 a call: at most 20 calls plus those in flight when it was reached
    (one a trial: each makes its 12 calls one after the other) are sent, so of the three
    trials' 36 calls some are refused however the trials interleave: rows whose call was
    refused end as ``budget_exceeded``, rows not started are not started, exit 6."""
    rows, calls_each = 9, 12
    spec_rows = [
        {
            "id": f"b{i}",
            "prompt": "hello",
            "label": "Hi.",
            "metadata": {"workflow": "storm", "calls": calls_each, "serial": True},
        }
        for i in range(rows)
    ]
    with serve_slots(SlotStub(slots=100, delay_sec=0.05)) as stub:
        spec = harbor_spec(
            llm={"base_url": stub.base_url, "model": "stub-model"},
            concurrency=TRIALS,
            timeouts={"agent_sec": 120, "grader_sec": 30},
        )
        done = run_harbor(tmp_path, spec_rows, spec, "--budget-tokens", "300", timeout=600)
    assert done.returncode == ExitCode.BUDGET_SPENT, done.stdout + done.stderr
    assert stub.calls <= 300 // 15 + TRIALS, stub.calls
    statuses = {row_id: row.get("error_category") for row_id, row in done.rows.items()}
    assert "budget_exceeded" in statuses.values(), statuses
    assert set(statuses.values()) <= {None, "budget_exceeded"}, statuses
    summary = done.summary
    assert summary["not_run"] == rows - len(done.rows) > 0
    budget = summary["budget"]
    assert budget["spent"]["tokens"] == 15 * stub.calls
    assert budget["refused_calls"] > 0
    assert "budget: tokens" in done.stdout + done.stderr
    print(f"budget 300: {stub.calls} calls sent, rows {statuses}, {summary['not_run']} not run")
