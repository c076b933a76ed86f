"""ModelJudge end to end against a real model: the embedded SmolLM2-135M-Instruct judges
the answers a chat workflow got from another embedded server (``llm: embedded``), through
the real ``osmo-run local``.

A 135M model rarely follows the answer format, so a row either carries a parsed grade
with the judge's reasoning, or fails in the grader phase as a ``validation_error``
quoting the judge's last reply, never a silent 0. Either way the judge's real token
counts are in the row, apart from the workflow's ``usage``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from osmo_run.run.records import OutputRecord
from osmo_run.sdk.context import LLMEndpoint
from tests.conftest import CLI, REPO, read_jsonl

pytestmark = pytest.mark.slow
WriteJsonl = Callable[..., Path]


def test_a_real_model_judges_a_real_models_answers(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl, embedded_llm: LLMEndpoint
) -> None:
    dataset = write_jsonl(
        [
            {"id": "capital", "user_prompt": "What is the capital of France?", "label": "Paris"},
            {"id": "sum", "user_prompt": "What is 2 + 2?", "label": "4"},
        ]
    )
    spec = {
        "workflow": "examples.llm_chat:ChatWorkflow",
        "grader": "osmo_run.graders:ModelJudge",
        "code_dir": str(REPO),
        "llm": "embedded",
        "concurrency": 2,
        "workflow_config": {"settings": {"max_tokens": 24}},
        "grader_config": {
            "settings": {
                "base_url": embedded_llm.base_url,
                "model": embedded_llm.model,
                "rubric": "The answer agrees with the reference answer.",
                "max_attempts": 2,
                "max_tokens": 32,
            }
        },
        "timeouts": {"agent_sec": 120, "grader_sec": 240},
        "retries": {"max_attempts": 1},
    }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    output = tmp_path / "results.jsonl"
    proc = cli("local", dataset, "--spec", spec_path, "-o", output, "--plain", timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    rows = read_jsonl(output)
    assert len(rows) == 2
    for row in rows:
        OutputRecord.model_validate(row)
        judged = row["info"]["grader"]
        assert judged["judge_model"] == embedded_llm.model
        assert judged["judge_usage"]["prompt_tokens"] > 0
        assert judged["judge_usage"]["completion_tokens"] > 0
        assert row["usage"]["model_calls"] == 1  # the workflow's call alone
        if row["status"] == "success":
            assert row["reward"] in (0.0, 0.5, 1.0)
            assert judged["grade"] in ("C", "P", "I")
            assert isinstance(judged["reasoning"], str)
        else:
            assert (row["error_category"], row["error_phase"]) == ("validation_error", "grader")
            assert row["reward"] is None
            assert judged["judge_usage"]["model_calls"] == 2
            last = judged["unreadable_replies"][-1]
            assert f"last reply: {last[:40]!r}"[:-1] in row["error_message"]
