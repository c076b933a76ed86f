"""ModelJudge end to end against a real model: the embedded SmolLM2-135M-Instruct answers
(``llm: embedded``) and judges (``judge: embedded``) through the real ``osmo-run local``,
one server for both.

A 135M model rarely follows the answer format, so a row either carries a parsed grade
with the judge's reasoning, or fails in the grader phase as a ``validation_error``
quoting the judge's last reply, never a silent 0. Either way the judge's real token
counts are the row's ``grader_usage``, apart from the workflow's ``usage``, and the
summary totals them apart. The run is then regraded with the same judge, started again
for the regrade from the spec's ``judge: embedded``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from osmo_run.run.writing.records import OutputRecord
from tests.conftest import CLI, REPO, WriteJsonl, read_jsonl
from tests.llm.conftest import require_embedded

pytestmark = pytest.mark.slow


def test_a_real_model_judges_a_real_models_answers(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    require_embedded()
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
        "judge": "embedded",
        "concurrency": 2,
        "workflow_config": {"settings": {"max_tokens": 24}},
        "grader_config": {
            "settings": {
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
    output = tmp_path / "run" / "results.jsonl"
    proc = cli("local", dataset, "--spec", spec_path, "-o", output, "--plain", timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    rows = read_jsonl(output)
    assert len(rows) == 2
    for row in rows:
        OutputRecord.model_validate(row)
        judged = row["info"]["grader"]
        assert judged["judge_model"] == "SmolLM2-135M-Instruct"
        assert row["usage"]["model_calls"] == 1  # the workflow's call alone
        judge_usage = row["grader_usage"]  # the judge's, apart
        assert judge_usage["prompt_tokens"] > 0 and judge_usage["completion_tokens"] > 0
        if row["status"] == "success":
            assert row["reward"] in (0.0, 0.5, 1.0)
            assert judged["grade"] in ("C", "P", "I")
            assert isinstance(judged["reasoning"], str)
            assert judge_usage["model_calls"] in (1, 2)
        else:
            assert (row["error_category"], row["error_phase"]) == ("validation_error", "grader")
            assert row["reward"] is None
            assert judge_usage["model_calls"] == 2
            last = judged["unreadable_replies"][-1]
            assert f"last reply: {last[:40]!r}"[:-1] in row["error_message"]
    manifest = json.loads(output.with_name("results.manifest.json").read_text())
    assert manifest["info"]["judge_base_url"] == manifest["info"]["llm_base_url"]  # one server
    assert manifest["defining"]["judge_model"] == "SmolLM2-135M-Instruct"
    summary = json.loads(output.with_name("results.summary.json").read_text())
    assert summary["usage"]["model_calls"] == 2
    grader_total = sum(row["grader_usage"]["total_tokens"] for row in rows)
    assert summary["grader_usage"]["total_tokens"] == grader_total
    assert summary["grader_usage"]["per_rollout"]["total_tokens"]["max"] == max(
        row["grader_usage"]["total_tokens"] for row in rows
    )
    printed = proc.stdout + proc.stderr
    assert f"grader tokens  {grader_total:,} (" in printed  # the rendered summary's line
    # a judge regrade from a spec's judge section starts the embedded judge for itself
    regrade_spec = tmp_path / "regrade.yaml"
    grader_config = {"settings": {"scale": "number", "max_attempts": 1, "max_tokens": 16}}
    regrade_spec.write_text(
        json.dumps({**spec, "grader_config": grader_config, "llm": None}), encoding="utf-8"
    )
    regraded = cli("regrade", output, "--spec", regrade_spec, timeout=600)
    assert regraded.returncode in (0, 1), regraded.stderr
    (again,) = tmp_path.glob("run-regrade-*/results.jsonl")
    for row in read_jsonl(again):
        assert row["usage"] == next(r["usage"] for r in rows if r["row_id"] == row["row_id"])
        assert row["grader_usage"]["model_calls"] == 1  # one reply, read or not
