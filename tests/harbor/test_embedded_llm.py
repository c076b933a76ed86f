"""``llm: embedded`` with the harbor backend: the model server on the host's loopback is
reached from inside the Docker trials (through the relay), and token usage comes back
from the trials into the output rows and the summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harbor.conftest import REPO, HarborRun, harbor_spec, run_harbor
from tests.llm.conftest import require_embedded

FAILURE_FIELDS = ("error_category", "error_phase", "error_message", "attempts", "backend")


def _log_tail(run: HarborRun, lines: int = 40) -> str:
    """The end of the embedded model server's log (results.llm.log), for a failure."""
    log = run.output.with_suffix(".llm.log")
    if not log.is_file():
        return f"{log}: missing"
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


@pytest.mark.docker
@pytest.mark.slow
def test_trials_reach_the_embedded_model_and_report_usage(tmp_path: Path) -> None:
    require_embedded()
    spec = harbor_spec(
        workflow="examples.llm_chat:ChatWorkflow",
        grader="examples.llm_chat:ContainsLabelGrader",
        code_dir=str(REPO),
        llm="embedded",
        concurrency=2,
        workflow_config={"settings": {"max_tokens": 16}},
        timeouts={"agent_sec": 120, "grader_sec": 30},
    )
    rows = [
        {"id": "fr", "user_prompt": "What is the capital of France?", "ground_truth": "Paris"},
        {"id": "it", "user_prompt": "What is the capital of Italy?", "ground_truth": "Rome"},
    ]
    # A busy CI box builds the prebuilt image of the whole repository first: a wide bound.
    run = run_harbor(tmp_path, rows, spec, timeout=600)
    failed = {
        row_id: {key: row.get(key) for key in FAILURE_FIELDS}
        for row_id, row in run.rows.items()
        if row["status"] != "success"
    }
    assert run.returncode == 0 and not failed, (failed, run.stderr[-3000:], _log_tail(run))
    for row in run.rows.values():
        assert row["backend"]["trial_name"]  # it ran in a trial container
        assert row["sample"]["messages"][-1]["content"].strip()
        assert row["usage"]["model_calls"] == 1 and row["usage"]["completion_tokens"] > 0
    assert run.summary["usage"]["model_calls"] == 2
    assert run.leftovers == []


@pytest.mark.docker
@pytest.mark.slow
def test_trials_capture_the_embedded_models_tokens_into_the_turns_file(tmp_path: Path) -> None:
    """``llm.capture: tokens`` in Harbor trials: the trial's calls (through the relay) ask
    for the ids, the trial's runner keeps its turns, and the host writes them to the run's
    turns file: the completion's ids, as the embedded server gives them."""
    require_embedded()
    spec = harbor_spec(
        workflow="examples.llm_chat:ChatWorkflow",
        grader="examples.llm_chat:ContainsLabelGrader",
        code_dir=str(REPO),
        llm={"embedded": True, "capture": "tokens"},
        concurrency=2,
        workflow_config={"settings": {"max_tokens": 8}},
        timeouts={"agent_sec": 120, "grader_sec": 30},
    )
    rows = [{"id": "fr", "user_prompt": "What is the capital of France?", "ground_truth": "Paris"}]
    run = run_harbor(tmp_path, rows, spec, timeout=600)
    # graded either way (8 tokens may not name Paris): the rollout itself succeeded
    assert run.rows["fr"]["status"] == "success", (run.rows, run.stderr[-3000:], _log_tail(run))
    turns_file = run.output.with_name("results.turns.jsonl")
    (line,) = [json.loads(text) for text in turns_file.read_text().splitlines()]
    assert line["rollout_id"] == "fr"
    (turn,) = line["turns"]
    assert turn["completion_token_ids"] and all(
        isinstance(i, int) for i in turn["completion_token_ids"]
    )
    assert len(turn["logprobs"]) == len(turn["completion_token_ids"])
    assert turn["messages"][-1]["content"] == "What is the capital of France?"
