"""``llm: embedded`` with the harbor backend: the model server on the host's loopback is
reached from inside the Docker trials (through the relay), and token usage comes back
from the trials into the output rows and the summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harbor.conftest import REPO, harbor_spec, run_harbor
from tests.llm.conftest import require_embedded


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
    run = run_harbor(tmp_path, rows, spec)
    assert run.returncode == 0, run.stderr
    for row in run.rows.values():
        assert row["status"] == "success", row["error_message"]
        assert row["backend"]["trial_name"]  # it ran in a trial container
        assert row["sample"]["messages"][-1]["content"].strip()
        assert row["usage"]["model_calls"] == 1 and row["usage"]["completion_tokens"] > 0
    assert run.summary["usage"]["model_calls"] == 2
    assert run.leftovers == []
