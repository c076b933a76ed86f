"""The run budget through the real ``osmo-run local``: once spent, no model call leaves.

The endpoint is :mod:`tests.llm.slot_stub` (15 tokens a call: 10 prompt, 5 completion; a
paid model API cannot be reached here). A budget of 1,000 tokens at concurrency 50, rows of
three calls each, sends at most 1,000 / 15 calls plus those in flight when it was reached;
the rows whose next call was refused end as ``budget_exceeded``, the rows not started are
not recorded, one line names the budget, the run exits 6, and ``--resume --budget-tokens
5000`` finishes it.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from osmo_run.errors import ExitCode
from tests.conftest import CLI, REPO, cli_env, error_lines, read_jsonl
from tests.llm.endpoint_runs import CHAT, ENV, TURNS, write_rows, write_spec
from tests.llm.slot_stub import SlotStub, serve_slots

PER_CALL = 15
ROWS = 100


def _spec(tmp_path: Path, **fields: Any) -> Path:
    return write_spec(tmp_path, **{"concurrency": 50, **fields})


def _run(cli: CLI, tmp_path: Path, spec: Path, *args: str, rows: int = ROWS) -> tuple[int, str]:
    output = tmp_path / "out" / "results.jsonl"
    proc = cli(
        "local",
        write_rows(tmp_path, rows),
        "--spec",
        spec,
        "-o",
        output,
        "--display",
        "plain",
        *args,
        timeout=300,
        env=cli_env(**ENV),
    )
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text
    return proc.returncode, text


def _output(tmp_path: Path) -> Path:
    return tmp_path / "out" / "results.jsonl"


def _summary(tmp_path: Path) -> dict[str, Any]:
    return dict(json.loads((tmp_path / "out" / "results.summary.json").read_text()))


def test_a_token_budget_stops_the_calls_and_resume_with_a_larger_one_finishes(
    cli: CLI, tmp_path: Path
) -> None:
    with serve_slots(SlotStub(slots=1000, delay_sec=0.05)) as stub:
        spec = _spec(tmp_path, workflow=TURNS, llm={"base_url": stub.base_url, "model": "m"})
        code, text = _run(cli, tmp_path, spec, "--budget-tokens", "1000")
        sent_first = stub.answered

        assert code == ExitCode.BUDGET_SPENT == 6, text
        # calls sent: at most what the budget allows, plus the calls in flight (one per
        # row: the concurrency) when it was reached
        assert math.ceil(1000 / PER_CALL) <= sent_first <= 1000 // PER_CALL + 50, sent_first
        records = read_jsonl(_output(tmp_path))
        by_category = Counter(r["error_category"] for r in records)
        assert set(by_category) <= {None, "budget_exceeded"}, by_category
        refused = [r for r in records if r["error_category"] == "budget_exceeded"]
        assert refused and all(len(r["attempts"]) == 0 for r in refused), "never retried"
        assert "this model call was not sent" in refused[0]["error_message"]
        summary = _summary(tmp_path)
        not_started = ROWS - len(records)
        assert not_started > 0 and summary["not_run"] == not_started
        budget = summary["budget"]
        spent = budget["spent"]["tokens"]
        assert spent == PER_CALL * sent_first, "every call sent was counted"
        # the overshoot: what the calls in flight when it was reached used, at most
        # (concurrency - 1) calls of 15 tokens
        assert 1000 <= spent < 1000 + 50 * PER_CALL
        assert budget["limits"] == {"tokens": 1000, "usd": None, "model_calls": None}
        assert budget["stopped"]["refused_calls"] == len(refused)
        stop_lines = [line for line in text.splitlines() if line.startswith("budget: tokens")]
        assert stop_lines[-1] == (
            f"budget: tokens {spent:,} of 1,000 reached; {len(refused)} model calls were not "
            "sent and no further rows were started (--resume with a larger budget continues)"
        )

        code, text = _run(cli, tmp_path, spec, "--resume", "--budget-tokens", "5000")

    assert code == ExitCode.OK, text
    assert (
        f"--resume: the {len(refused)} rollouts the budget stopped (budget_exceeded) run "
        "again, with the rows not started"
    ) in text.splitlines()
    records = read_jsonl(_output(tmp_path))
    assert len(records) == ROWS and {r["status"] for r in records} == {"success"}
    rerun = [r for r in records if r["attempts"]]
    assert len(rerun) == len(refused), "the refused rows ran again, keeping their attempt"
    # the resumed run counted what the rows kept from the first had spent
    assert _summary(tmp_path)["budget"]["spent"]["tokens"] == 3 * PER_CALL * ROWS


def test_a_usd_budget_prices_calls_by_the_specs_prices(cli: CLI, tmp_path: Path) -> None:
    with serve_slots(SlotStub(slots=1000, delay_sec=0.02)) as stub:
        # 10 prompt tokens at $1,000 / Mtok + 5 completion tokens at $2,000 / Mtok: $0.02 a call
        spec = _spec(
            tmp_path,
            concurrency=4,
            llm={"base_url": stub.base_url, "model": "stub-model"},
            prices={"stub-model": {"input_per_mtok": 1000, "output_per_mtok": 2000}},
            budget={"usd": 0.5},
        )
        code, text = _run(cli, tmp_path, spec, rows=60)

    assert code == ExitCode.BUDGET_SPENT, text
    assert 25 <= stub.answered <= 25 + 4
    spent = _summary(tmp_path)["budget"]["spent"]
    assert spent["usd"] == round(0.02 * stub.answered, 6)
    assert any(line.startswith("budget: usd 0.") for line in text.splitlines())


def test_the_judges_calls_count_against_the_budget(cli: CLI, tmp_path: Path) -> None:
    model = SlotStub(slots=1000, delay_sec=0.01)
    judge = SlotStub(slots=1000, delay_sec=0.01, reply="GRADE: C")
    with serve_slots(model), serve_slots(judge):
        spec = _spec(
            tmp_path,
            concurrency=1,
            llm={"base_url": model.base_url, "model": "stub-model"},
            judge={"base_url": judge.base_url, "model": "stub-judge"},
            grader="osmo_run.graders:ModelJudge",
            grader_config={"settings": {"rubric": "any greeting"}},
            budget={"model_calls": 10},
        )
        code, text = _run(cli, tmp_path, spec, rows=20)

    assert code == ExitCode.BUDGET_SPENT, text
    # one call of the workflow and one of the judge per row: 5 rows spend the 10 calls
    assert (model.answered, judge.answered) == (5, 5)
    records = read_jsonl(_output(tmp_path))
    assert [r["error_category"] for r in records] == [None] * 5, "the 6th row never started"
    summary = _summary(tmp_path)
    assert summary["budget"]["spent"]["model_calls"] == 10 and summary["not_run"] == 15


def test_a_usd_budget_without_the_models_price_is_one_line(cli: CLI, tmp_path: Path) -> None:
    llm = {"base_url": "http://127.0.0.1:9/v1", "model": "stub-model"}
    proc = cli(
        "local",
        write_rows(tmp_path, 2),
        "--spec",
        _spec(tmp_path, llm=llm),
        "--budget-usd",
        "3",
        env=cli_env(**ENV),
    )
    assert proc.returncode == ExitCode.INVALID_INPUT
    (line,) = error_lines(proc.stderr)
    assert "budget.usd needs the price of llm.model 'stub-model'" in line


def test_a_budget_holds_rows_in_child_processes_through_the_gateway(
    cli: CLI, tmp_path: Path
) -> None:
    """Rows in child processes (``--isolation process``) call the model through the run's
    gateway on 127.0.0.1: counted and stopped as in-process rows are. 100 tokens at 15 a
    call, concurrency 5: at most 7 calls plus the 4 others in flight."""
    with serve_slots(SlotStub(slots=1000, delay_sec=0.05)) as stub:
        spec = _spec(
            tmp_path, concurrency=5, llm={"base_url": stub.base_url, "model": "stub-model"}
        )
        code, text = _run(
            cli, tmp_path, spec, "--isolation", "process", "--budget-tokens", "100", rows=20
        )
    assert code == ExitCode.BUDGET_SPENT, text
    assert math.ceil(100 / PER_CALL) <= stub.calls <= 100 // PER_CALL + 5, stub.calls
    records = read_jsonl(_output(tmp_path))
    by_category = Counter(r["error_category"] for r in records)
    assert set(by_category) <= {None, "budget_exceeded"}, by_category
    summary = _summary(tmp_path)
    assert summary["not_run"] == 20 - len(records) > 0
    assert summary["budget"]["spent"]["tokens"] == PER_CALL * stub.calls
    (limit,) = summary["model_limits"]
    assert limit["calls"] == stub.calls  # the children's calls went through the run's limit
    assert "budget: tokens" in text


def test_a_budget_for_trials_in_a_remote_sandbox_is_refused_before_any_trial(
    cli: CLI, tmp_path: Path
) -> None:
    """Trials in a remote environment call their model from there, not through this
    machine's model gateway: refused up front, before the environment is asked anything."""
    proc = cli(
        "harbor",
        write_rows(tmp_path, 2),
        "--task-dir",
        REPO / "tasks" / "calculator",
        "--workflow",
        CHAT,
        "--code-dir",
        REPO,
        "--env",
        "daytona",
        "-o",
        tmp_path / "out" / "results.jsonl",
        "--budget-tokens",
        "100",
        env=cli_env(**ENV),
    )
    assert proc.returncode == ExitCode.INVALID_INPUT
    (line,) = error_lines(proc.stderr)
    assert "trials in the daytona environment call their model from a remote sandbox" in line
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_a_budget_for_trials_calling_an_endpoint_elsewhere_is_refused(
    cli: CLI, tmp_path: Path
) -> None:
    """Trials call an endpoint on another machine directly: nothing here could count it."""
    llm = {"base_url": "http://10.0.0.5:8000/v1", "model": "stub-model"}
    proc = cli(
        "harbor",
        write_rows(tmp_path, 2),
        "--spec",
        _spec(tmp_path, llm=llm),
        "--task-dir",
        REPO / "tasks" / "calculator",
        "-o",
        tmp_path / "out" / "results.jsonl",
        "--budget-tokens",
        "100",
        env=cli_env(**ENV),
    )
    assert proc.returncode == ExitCode.INVALID_INPUT
    (line,) = error_lines(proc.stderr)
    assert "budget: llm.base_url http://10.0.0.5:8000/v1 is not on this machine" in line
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_a_token_budget_fails_closed_when_answers_carry_no_usage(cli: CLI, tmp_path: Path) -> None:
    """An endpoint that never reports usage cannot be counted: the budget stops the run at
    the first such answer instead of letting every call through uncounted."""
    with serve_slots(SlotStub(slots=1000, delay_sec=0.05, usage=False)) as stub:
        spec = _spec(tmp_path, workflow=TURNS, llm={"base_url": stub.base_url, "model": "m"})
        code, text = _run(cli, tmp_path, spec, "--budget-tokens", "1000")

    assert code == ExitCode.BUDGET_SPENT, text
    # at most the calls in flight when the first answer came: one per row started
    assert stub.answered <= 50, stub.answered
    stop_lines = [line for line in text.splitlines() if line.startswith("budget: ")]
    assert stop_lines, text
    assert stop_lines[-1].startswith(
        "budget: budget.tokens cannot be kept: an answer of model 'm' came without a usable "
        "usage.prompt_tokens"
    ), stop_lines
    records = read_jsonl(_output(tmp_path))
    assert {r["error_category"] for r in records} <= {None, "budget_exceeded"}
    assert _summary(tmp_path)["not_run"] == ROWS - len(records) > 0


def test_a_calls_budget_needs_no_usage(cli: CLI, tmp_path: Path) -> None:
    with serve_slots(SlotStub(slots=1000, delay_sec=0.01, usage=False)) as stub:
        spec = _spec(
            tmp_path, llm={"base_url": stub.base_url, "model": "m"}, budget={"model_calls": 500}
        )
        code, text = _run(cli, tmp_path, spec, rows=20)
    assert code == ExitCode.OK, text
    assert stub.answered == 20
