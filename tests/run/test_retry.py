"""Retries: which categories go again, how long the backoff is, and what a user sees in
the output file and on screen when a row is retried."""

from __future__ import annotations

import asyncio
import io
import itertools
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from osmo_run import (
    AgentWorkflowConfig,
    ConcurrencyConfig,
    ErrorCategory,
    ExecutionResult,
    RolloutStatus,
)
from osmo_run.backends.local import LocalBackend
from osmo_run.errors import SpecError
from osmo_run.run.configuring.spec import RetrySpec, RunSpec
from osmo_run.run.configuring.spec_file import load_spec
from osmo_run.run.controls.retry import DEFAULT_RETRY_CATEGORIES, RetryPolicy
from osmo_run.run.executing.display import LiveDisplay, NullDisplay
from osmo_run.run.executing.runner import Runner, work_items
from osmo_run.run.reading.dataset import Dataset
from osmo_run.run.writing.output import OutputWriter
from osmo_run.run.writing.records import OutputRecord
from tests.conftest import CLI, WriteJsonl, jsonl_bytes, read_jsonl
from tests.workflows import CountingWorkflow


def test_default_policy_retries_transient_categories_only() -> None:
    policy = RetrySpec().policy()
    assert policy.categories == DEFAULT_RETRY_CATEGORIES
    assert policy.max_attempts == 3
    for category in (
        ErrorCategory.RATE_LIMIT,
        ErrorCategory.INFRA_ERROR,
        ErrorCategory.MODEL_API_ERROR,
    ):
        assert policy.retries(category, 1, 0.0), category
    for never in (
        ErrorCategory.VALIDATION_ERROR,
        ErrorCategory.AGENT_ERROR,
        ErrorCategory.TIMEOUT,
        ErrorCategory.CANCELLED,
        ErrorCategory.INTERNAL_ERROR,
        None,
    ):
        assert not policy.retries(never, 1, 0.0), never


def test_validation_errors_are_never_retried_even_when_listed() -> None:
    policy = RetryPolicy(categories=frozenset({ErrorCategory.VALIDATION_ERROR}))
    assert not policy.retries(ErrorCategory.VALIDATION_ERROR, 1, 0.0)
    with pytest.raises(ValueError, match="validation_error is never retried"):
        RetrySpec(categories=["validation_error"])
    with pytest.raises(ValueError, match="'flaky' is not an error category"):
        RetrySpec(categories=["flaky"])


def test_max_attempts_counts_the_first_try() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert policy.retries(ErrorCategory.RATE_LIMIT, 1, 0.0)
    assert policy.retries(ErrorCategory.RATE_LIMIT, 2, 0.0)
    assert not policy.retries(ErrorCategory.RATE_LIMIT, 3, 0.0)
    assert not RetryPolicy(max_attempts=1).retries(ErrorCategory.RATE_LIMIT, 1, 0.0)


def test_no_retry_starts_once_the_total_backoff_is_spent() -> None:
    policy = RetryPolicy(max_attempts=100, max_total_retry_sec=10.0)
    assert policy.retries(ErrorCategory.RATE_LIMIT, 5, 9.9)
    assert not policy.retries(ErrorCategory.RATE_LIMIT, 5, 10.0)


def test_backoff_grows_exponentially_up_to_its_cap() -> None:
    policy = RetryPolicy(initial_backoff_sec=1.0, multiplier=2.0, max_backoff_sec=5.0, jitter=0.0)
    assert [policy.delay_sec(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_jitter_spreads_the_delay_within_its_bounds() -> None:
    policy = RetryPolicy(initial_backoff_sec=2.0, multiplier=3.0, jitter=0.5)
    rng = random.Random(7)
    delays = [policy.delay_sec(2, rng) for _ in range(500)]
    assert all(3.0 <= d <= 9.0 for d in delays)  # 6 s +- 50%
    assert max(delays) - min(delays) > 4.0, "jitter must actually spread retries"
    assert policy.delay_sec(2, random.Random(1)) == policy.delay_sec(2, random.Random(1))


def test_retries_section_of_the_spec(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workflow: m:W\n"
        "retries: {max_attempts: 5, categories: [rate_limit], initial_backoff_sec: 0.5,\n"
        "          max_backoff_sec: 4, multiplier: 3, jitter: 0, max_total_retry_sec: 30}\n"
    )
    policy = load_spec(spec).retries.policy()
    assert policy == RetryPolicy(
        max_attempts=5,
        categories=frozenset({ErrorCategory.RATE_LIMIT}),
        initial_backoff_sec=0.5,
        max_backoff_sec=4.0,
        multiplier=3.0,
        jitter=0.0,
        max_total_retry_sec=30.0,
    )
    spec.write_text("workflow: m:W\nretries: {max_attempts: 0}\n")
    with pytest.raises(SpecError, match=r"field 'retries\.max_attempts'"):
        load_spec(spec)
    assert RunSpec(workflow="m:W").retries.max_attempts == 3


def test_live_table_shows_a_row_waiting_to_retry_with_a_countdown() -> None:
    display = LiveDisplay(Console(file=io.StringIO(), width=120))
    display.row_started("row-a")
    failed = ExecutionResult(
        "row-a",
        RolloutStatus.FAILURE,
        error_category=ErrorCategory.RATE_LIMIT,
        error_message="RateLimitError: slow down",
    )
    display.row_retrying("row-a", 2, 3, 30.0, failed)
    console = Console(file=io.StringIO(), width=120)
    console.print(display)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "row-a" in text
    assert re.search(r"retry 2/3 after rate_limit, next try in (2\d|30)\.\ds", text), text
    display.row_phase("row-a", "running")
    console = Console(file=io.StringIO(), width=120)
    console.print(display)
    assert "next try" not in console.file.getvalue()  # type: ignore[attr-defined]


def _spec(tmp_path: Path, **retries: object) -> Path:
    spec = tmp_path / "spec.yaml"
    settings = {
        "max_attempts": 3,
        "initial_backoff_sec": 0.05,
        "multiplier": 2,
        "jitter": 0,
        **retries,
    }
    spec.write_text(
        yaml.safe_dump(
            {
                "workflow": "tests.workflows:CountingWorkflow",
                "grader": "tests.workflows:ScriptedGrader",
                "retries": settings,
            }
        )
    )
    return spec


def _calls(calls: Path, rollout_id: str) -> list[float]:
    path = calls / rollout_id
    return [float(t) for t in path.read_text().split()] if path.exists() else []


def test_retried_rows_record_each_attempt_and_wait_between_them(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    def row(row_id: str, fail_first: int, fail_with: str) -> dict[str, object]:
        meta = {"calls": str(calls), "fail_first": fail_first, "fail_with": fail_with}
        return {"id": row_id, "prompt": "hi", "label": "hi", "metadata": meta}

    data = write_jsonl(
        [
            row("flaky", 2, "RateLimitError"),
            row("invalid", 2, "ValueError"),
            row("hopeless", 99, "RateLimitError"),
            row("fine", 0, "RateLimitError"),
        ]
    )
    output = tmp_path / "out.jsonl"
    proc = cli.local(data, "--spec", _spec(tmp_path), "--display", "plain", "-o", output)
    assert proc.returncode == 1, proc.stderr
    records = {r["row_id"]: r for r in read_jsonl(output)}
    assert len(records) == 4
    for record in records.values():
        OutputRecord.model_validate(record)

    flaky = records["flaky"]
    assert (flaky["status"], flaky["reward"], flaky["attempt"]) == ("success", 1.0, 3)
    assert [(a["attempt"], a["error_category"]) for a in flaky["attempts"]] == [
        (1, "rate_limit"),
        (2, "rate_limit"),
    ]
    assert flaky["attempts"][0]["error_message"].startswith(
        "RateLimitError: scripted RateLimitError on call 1"
    )
    times = _calls(calls, "flaky")
    assert len(times) == 3
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[0] >= 0.045 and gaps[1] >= 0.095, gaps  # 0.05 s, then 0.1 s (no jitter)
    assert gaps[1] < 2.0, gaps

    invalid = records["invalid"]
    assert (invalid["status"], invalid["error_category"]) == ("failure", "validation_error")
    assert (invalid["attempt"], invalid["attempts"]) == (1, [])
    assert len(_calls(calls, "invalid")) == 1

    hopeless = records["hopeless"]
    assert (hopeless["status"], hopeless["error_category"], hopeless["attempt"]) == (
        "failure",
        "rate_limit",
        3,
    )
    assert [a["attempt"] for a in hopeless["attempts"]] == [1, 2]
    assert len(_calls(calls, "hopeless")) == 3

    assert (records["fine"]["attempt"], records["fine"]["attempts"]) == (1, [])
    assert "RETRY row flaky (attempt 2/3 in " in proc.stdout
    assert "RETRY row flaky (attempt 3/3 in " in proc.stdout
    assert ") after rate_limit: RateLimitError: scripted RateLimitError on call 1" in proc.stdout
    assert "RETRY row invalid" not in proc.stdout
    # only the final failures count: one validation_error, one rate_limit
    assert "FAILURE row hopeless [rate_limit, workflow]" in proc.stdout


def test_max_attempts_and_categories_come_from_the_spec(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    meta = {"calls": str(calls), "fail_first": 99, "fail_with": "RateLimitError"}
    other = {"calls": str(calls), "fail_first": 1, "fail_with": "APIConnectionError"}
    data = write_jsonl(
        [
            {"id": "limited", "prompt": "hi", "metadata": meta},
            {"id": "api", "prompt": "hi", "metadata": other},
        ]
    )
    spec = _spec(tmp_path, max_attempts=5, categories=["rate_limit"], multiplier=1)
    output = tmp_path / "out.jsonl"
    proc = cli.local(data, "--spec", spec, "-o", output)
    assert proc.returncode == 1, proc.stderr
    records = {r["row_id"]: r for r in read_jsonl(output)}
    assert records["limited"]["attempt"] == 5
    assert len(records["limited"]["attempts"]) == 4
    assert len(_calls(calls, "limited")) == 5
    # model_api_error is retried by default, but this spec lists rate_limit only
    assert (records["api"]["error_category"], records["api"]["attempt"]) == (
        "model_api_error",
        1,
    )
    assert len(_calls(calls, "api")) == 1


def _run_in_process(
    tmp_path: Path, rows: list[dict[str, Any]], policy: RetryPolicy, interrupt_after: float = 0
) -> list[dict[str, Any]]:
    dataset_path = tmp_path / "data.jsonl"
    dataset_path.write_bytes(jsonl_bytes(list(rows)))
    dataset = Dataset(dataset_path, agent_timeout_sec=5, grader_timeout_sec=5)
    backend = LocalBackend(CountingWorkflow, AgentWorkflowConfig(ConcurrencyConfig(4)), None)
    output = tmp_path / "out.jsonl"

    async def main() -> None:
        with OutputWriter(output) as writer:
            runner = Runner(backend, writer, NullDisplay(), retry=policy)
            if interrupt_after:
                asyncio.get_running_loop().call_later(interrupt_after, runner.interrupt)
            await runner.run(work_items(dataset.rows()))

    asyncio.run(main())
    return read_jsonl(output)


def test_total_backoff_cap_stops_retries_once_spent(tmp_path: Path, calls: Path) -> None:
    meta = {"calls": str(calls), "fail_first": 99, "fail_with": "RateLimitError"}
    policy = RetryPolicy(
        max_attempts=10,
        initial_backoff_sec=0.05,
        multiplier=1.0,
        jitter=0.0,
        max_total_retry_sec=0.12,
    )
    (record,) = _run_in_process(tmp_path, [{"id": "r", "prompt": "hi", "metadata": meta}], policy)
    # waits of 0.05 s: retries start after 0, 0.05 and 0.10 s spent, not after 0.15
    assert record["attempt"] == 4
    assert len(_calls(calls, "r")) == 4


def test_an_interrupt_while_waiting_to_retry_records_the_row_cancelled_with_its_attempts(
    tmp_path: Path,
    calls: Path,
) -> None:
    meta = {"calls": str(calls), "fail_first": 1, "fail_with": "RateLimitError"}
    policy = RetryPolicy(initial_backoff_sec=30.0, jitter=0.0)
    started = time.monotonic()
    (record,) = _run_in_process(
        tmp_path, [{"id": "r", "prompt": "hi", "metadata": meta}], policy, interrupt_after=0.3
    )
    assert time.monotonic() - started < 5, "the backoff wait must not hold up an interrupt"
    assert (record["status"], record["error_category"], record["attempt"]) == (
        "cancelled",
        "cancelled",
        2,
    )
    assert [(a["attempt"], a["error_category"]) for a in record["attempts"]] == [(1, "rate_limit")]
    assert len(_calls(calls, "r")) == 1
