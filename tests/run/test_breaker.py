"""The breaker's pieces: what counts as one cause, when K in a row trip it, and what the
runner does then (dispatch stops, rows in flight finish and are recorded, retries of the
same failure are dropped). The whole run, through the CLI: tests/llm/test_breaker.py."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from osmo_run import ExecutionRequest, ExecutionResult
from osmo_run.run.controls.breaker import Breaker, failure_cause
from osmo_run.run.controls.retry import RetryPolicy
from osmo_run.run.executing.display import NullDisplay
from osmo_run.run.executing.runner import Runner, work_items
from osmo_run.run.reading.dataset import Dataset
from osmo_run.run.reporting.summary import RunSummary
from osmo_run.run.writing.output import OutputWriter
from osmo_run.sdk.names import docker_part, safe_name
from osmo_run.sdk.types import ErrorCategory, RolloutStatus
from osmo_run.testing import FakeBackend
from tests.conftest import jsonl_bytes, read_jsonl

REFUSED = (
    "ModelAPIError: cannot reach http://127.0.0.1:{port}/v1/chat/completions: Cannot connect "
    "to host 127.0.0.1:{port} ssl:default [Connect call failed ('127.0.0.1', {port})] "
    "({why}gave up after {tries} tries) (at /home/u/{file}.py:{line} in run)"
)


def _refused(
    port: int = 40123, tries: int = 3, line: int = 22, why: str = "", file: str = "a"
) -> str:
    return REFUSED.format(port=port, tries=tries, line=line, why=why, file=file)


def test_the_same_fault_in_different_rows_is_one_cause() -> None:
    first = failure_cause("model_api_error", _refused(tries=3, line=22), ("r1", "r1"))
    other = failure_cause(
        "model_api_error",
        _refused(
            tries=8, line=40, file="b", why="the next try would pass the rollout's deadline; "
        ),
        ("r2", "r2"),
    )
    assert first == other
    assert first is not None and first.startswith("model_api_error: ModelAPIError: cannot reach")
    assert "40123" not in first and "(at " not in first and "gave up" not in first


def test_trial_names_ids_temporary_files_and_numbers_are_masked() -> None:
    def infra(row: str, trial: str, uuid: str, tmp: str) -> str | None:
        message = (
            f"trial osmo-{trial}-3-{row}__env: container {uuid} exited 125 "
            f"(compose file /tmp/{tmp}/compose.json)\nlog: ..."
        )
        return failure_cause("infra_error", message, (row, row))

    one = infra("alpha", "0123456789ab", "550e8400-e29b-41d4-a716-446655440000", "tmpc40uv3xq")
    two = infra("beta-7", "ba9876543210", "123e4567-e89b-12d3-a456-426614174000", "tmp27gm6a30")
    assert (
        one
        == two
        == (
            "infra_error: trial osmo-<id>-#-<row>__env: container <id> exited # "
            "(compose file /tmp/<id>/compose.json)"
        )
    )


@pytest.mark.parametrize("ids", [["0", "1", "5", "7", "12"], ["v1", "chat", "v2", "r0", "x"]])
def test_short_and_numeric_row_ids_never_eat_the_address(ids: list[str]) -> None:
    """Integer ids (0, 1, ...) and short ones were masked before the address, so rows 0 and
    1 turned 127.0.0.1:40123 into different causes and never joined the streak."""
    causes = {failure_cause("model_api_error", _refused(), (i, i)) for i in ids}
    assert len(causes) == 1, causes
    (cause,) = causes
    assert cause is not None and "<addr>" in cause


def test_a_trial_name_made_from_an_unsafe_id_is_masked_like_the_id() -> None:
    """Harbor's trial names carry the id's Docker-safe form (``What is 2+2?`` ->
    ``what-is-2-2-<hash>``), not the id: it is masked too, or such rows never share a cause."""

    def infra(row: str) -> str | None:
        trial = f"osmo-ab12cd34-00003-{docker_part(safe_name(row))}"
        return failure_cause("infra_error", f"compose failed for {trial}__env", (row, row))

    causes = {infra(row) for row in ("What is 2+2?", "What is 3+3?", "Calc-1", "q/7")}
    assert causes == {"infra_error: compose failed for osmo-<id>-#-<row>__env"}


@pytest.mark.parametrize("status", [400, 413, 422])
def test_an_endpoint_judging_the_request_itself_is_the_rows_fault(status: int) -> None:
    """Too long for the context, a malformed message: every row past the limit fails the
    same way (a dataset sorted by length), but the environment is fine."""
    message = (
        f"ModelAPIError: http://127.0.0.1:8000/v1/chat/completions answered HTTP {status}: "
        "maximum context length is 8192 tokens, your request has 9100"
    )
    assert failure_cause("model_api_error", message, ("r1", "r1")) is None
    assert failure_cause("model_api_error", message.replace(str(status), "503"), ()) is not None


def test_different_faults_categories_and_first_lines_are_different_causes() -> None:
    refused = failure_cause("model_api_error", _refused())
    crashed = failure_cause(
        "model_api_error", "ModelAPIError: http://127.0.0.1:5/v1 answered HTTP 500: crashed"
    )
    limited = failure_cause("rate_limit", _refused())
    assert len({refused, crashed, limited}) == 3
    # an HTML error page: its title is the cause (numbers masked), the rest of the page is not
    page = "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body>"
    assert failure_cause("infra_error", page) == "infra_error: # Bad Gateway"
    assert failure_cause("infra_error", "x" * 500) == "infra_error: " + "x" * 199 + "…"


@pytest.mark.parametrize(
    "category", ["agent_error", "validation_error", "timeout", "cancelled", "internal_error", None]
)
def test_only_systemic_categories_have_a_cause(category: str | None) -> None:
    assert failure_cause(category, "RuntimeError: the same every time") is None


def _failure(
    i: int, category: ErrorCategory = ErrorCategory.INFRA_ERROR, rollout_id: str | None = None
) -> ExecutionResult:
    """A failure whose message differs from row to row only in the row's id and a number."""
    rollout_id = rollout_id or f"r{i}"
    return ExecutionResult.failure(rollout_id, category, f"engine gone (row {rollout_id}, try {i})")


def test_k_in_a_row_later_in_the_run_trip_it_and_anything_else_resets_the_count() -> None:
    breaker = Breaker(3)
    ok = ExecutionResult(rollout_id="ok", status=RolloutStatus.SUCCESS)
    agent = _failure(0, ErrorCategory.AGENT_ERROR)
    sequence = [ok, _failure(1), _failure(2), ok, _failure(3), agent, _failure(4), _failure(5)]
    assert [breaker.observe(r, r.rollout_id) for r in sequence] == [None] * len(sequence)
    trip = breaker.observe(_failure(6), "r6")
    assert trip is not None and trip.rollouts == ["r4", "r5", "r6"]
    assert trip.message == "engine gone (row r6, try 6)"
    assert breaker.observe(_failure(7), "r7") is None, "it trips once"
    assert breaker.matches(_failure(8), "r8") and not breaker.matches(agent, "r0")


def _run(
    tmp_path: Path, rows: int, backend: FakeBackend, breaker: Breaker, retry: RetryPolicy
) -> tuple[RunSummary, list[dict[str, Any]]]:
    dataset_path = tmp_path / "data.jsonl"
    dataset_path.write_bytes(
        jsonl_bytes([{"id": f"r{i:02d}", "prompt": "hi"} for i in range(rows)])
    )
    dataset = Dataset(dataset_path, agent_timeout_sec=5, grader_timeout_sec=5)
    output = tmp_path / "out.jsonl"

    async def main() -> RunSummary:
        with OutputWriter(output) as writer:
            runner = Runner(backend, writer, NullDisplay(), retry=retry, breaker=breaker)
            return await runner.run(work_items(dataset.rows()))

    return asyncio.run(main()), read_jsonl(output)


def test_the_runner_stops_dispatching_and_rows_in_flight_finish_and_are_recorded(
    tmp_path: Path,
) -> None:
    """Rows 0-2 fail one after another, every later row takes 0.5 s and succeeds. Five at
    a time: rows 5 and 6 start in the slots rows 0 and 1 free; when row 2 trips the breaker,
    rows 3-6 are in flight. They finish and are recorded; nothing else starts."""

    async def respond(request: ExecutionRequest) -> ExecutionResult:
        index = int(request.id[1:])
        if index >= 3:
            await asyncio.sleep(0.5)
            return ExecutionResult(rollout_id=request.id, status=RolloutStatus.SUCCESS)
        await asyncio.sleep(0.05 * (index + 1))
        return _failure(index, rollout_id=request.id)

    backend = FakeBackend(respond, max_concurrency=5)
    summary, records = _run(tmp_path, 40, backend, Breaker(3), RetryPolicy(max_attempts=1))
    assert [r.id for r in backend.requests] == [f"r{i:02d}" for i in range(7)]
    statuses = {r["row_id"]: r["status"] for r in records}
    assert statuses == {f"r{i:02d}": "failure" if i < 3 else "success" for i in range(7)}
    assert summary.breaker is not None and summary.breaker.in_flight == 4
    assert summary.breaker.rollouts == ["r00", "r01", "r02"]
    assert summary.stopped_early and summary.total == 7


@dataclass(frozen=True)
class _FirstRetryWaitsLong(RetryPolicy):
    """The run's first retry waits 30 s, every other one 10 ms."""

    asked: list[int] = field(default_factory=list)

    def delay_sec(self, retry_number: int, rng: random.Random | None = None) -> float:
        self.asked.append(retry_number)
        return 30.0 if len(self.asked) == 1 else 0.01


def test_a_row_waiting_to_retry_the_same_failure_is_recorded_when_it_trips(
    tmp_path: Path,
) -> None:
    """Row 0 fails first and waits 30 s to retry; rows 1 and 2 fail, retry at once, fail
    again and trip the breaker (2 in a row) with the same cause: row 0 is then recorded
    with the failure it had, without waiting out its 30 s or trying again."""

    async def respond(request: ExecutionRequest) -> ExecutionResult:
        index = int(request.id[1:])
        await asyncio.sleep(0.1 * index)
        return _failure(index, rollout_id=request.id)

    retry = _FirstRetryWaitsLong(max_attempts=2)
    backend = FakeBackend(respond, 3)
    started = time.monotonic()
    summary, records = _run(tmp_path, 3, backend, Breaker(2), retry)
    assert time.monotonic() - started < 10
    by_row = {r["row_id"]: r for r in records}
    assert (by_row["r00"]["attempt"], by_row["r00"]["attempts"]) == (1, [])
    assert [len(by_row[row]["attempts"]) for row in ("r01", "r02")] == [1, 1]
    assert [r.id for r in backend.requests].count("r00") == 1, "row 0 was not tried again"
    assert summary.breaker is not None and summary.breaker.rollouts == ["r01", "r02"]
