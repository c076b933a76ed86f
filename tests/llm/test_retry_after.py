"""An endpoint's ``Retry-After`` through the real ``osmo-run local``: no call comes before
it; one longer than a call waits (or than the row has left) ends the row with the rate
limit it got, saying why in its message, its usage recorded, and the run-level
``retries:`` policy does not call again before it either."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.conftest import CLI, REPO, cli_env, read_jsonl
from tests.llm.stub_model import StubModel

ENV = {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


def _spec(tmp_path: Path, base_url: str, **fields: Any) -> Path:
    values: dict[str, Any] = {
        "workflow": "tests.llm.llm_workflows:EndpointWorkflow",
        "code_dir": str(REPO),
        "llm": {"base_url": base_url, "model": "stub-model"},
        **fields,
    }
    spec = tmp_path / "spec.yaml"
    spec.write_text("\n".join(f"{key}: {json.dumps(value)}" for key, value in values.items()))
    return spec


def test_a_retry_after_over_the_bound_ends_the_row_saying_why(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    stub_model.fail_next(10, 429, retry_after=120)
    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "r1", "prompt": "hi"}\n')
    out = tmp_path / "run" / "results.jsonl"
    started = time.monotonic()
    # the default retries: policy (3 attempts, rate_limit retried)
    proc = cli.local(
        data, "--spec", _spec(tmp_path, stub_model.base_url), "-o", out, "--plain",
        env=cli_env(**ENV),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.monotonic() - started < 100  # it never waited the 120 s
    (row,) = read_jsonl(out)
    assert row["error_category"] == "rate_limit"
    assert "HTTP 429" in row["error_message"]
    assert "Retry-After 120s is longer than the 30s a call waits" in row["error_message"]
    assert row["usage"] is not None and row["usage"]["retried_calls"] == 1
    assert len(stub_model.requests) == 1, "called again before its Retry-After"
    assert row["attempts"] == []
    assert any("Retry-After" in warning for warning in row["warnings"]), row["warnings"]
    assert "Retry-After 120s" in proc.stdout + proc.stderr


def test_the_run_level_retry_waits_out_a_retry_after(
    cli: CLI, tmp_path: Path, stub_model: StubModel
) -> None:
    """A Retry-After of 2 s on a row with 1 s left: the call gives up at once (no retry
    past the deadline, the rate limit it got), and ``retries:`` tries the row again only
    once the 2 s have passed."""
    stub_model.fail_next(1, 429, retry_after=2)
    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "r1", "prompt": "hi"}\n')
    out = tmp_path / "run" / "results.jsonl"
    spec = _spec(
        tmp_path,
        stub_model.base_url,
        timeouts={"agent_sec": 1},
        retries={"max_attempts": 2, "initial_backoff_sec": 0.01},
    )
    proc = cli.local(data, "--spec", spec, "-o", out, "--plain", env=cli_env(**ENV))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = read_jsonl(out)
    assert row["status"] == "success"
    (attempt,) = row["attempts"]
    assert attempt["error_category"] == "rate_limit"
    assert "Retry-After 2s" in attempt["error_message"]
    first, second = stub_model.requests
    assert second.at - first.at >= 2.0, "called again before its Retry-After"


def test_a_deadline_during_the_retry_of_a_rate_limit_ends_the_row_with_the_rate_limit(
    stub_model: StubModel,
) -> None:
    """A row whose deadline passes while it retries a 429 fails with the 429 it was
    retrying (``rate_limit``, which the run-level policy may retry), not as a plain
    timeout, whether the deadline comes while it waits or during the retry itself."""
    from osmo_run.sdk.types import ErrorCategory, RolloutStatus
    from osmo_run.testing import run_workflow_sync
    from tests.llm.llm_workflows import EndpointWorkflow

    stub_model.delay_sec = 1.5  # the retry's answer would come after the deadline
    stub_model.fail_next(1, 429, retry_after=0.05, at_once=True)
    result = run_workflow_sync(EndpointWorkflow, "hi", llm=stub_model.endpoint, timeout_sec=1.0)
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.RATE_LIMIT, result.error_message
    assert "HTTP 429" in (result.error_message or "")
    assert len(stub_model.requests) == 2
