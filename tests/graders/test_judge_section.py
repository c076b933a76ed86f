"""The spec's ``judge:`` section through the real ``osmo-run local``: it reaches the graders
(in this process and in ``--isolation process`` children), a judged run shows the judge's
tokens apart from the agent's in every row and in the summary, the judge's key is a secret,
and a bad section stops the run before any row.

Both models are scripted OpenAI-compatible endpoints on 127.0.0.1 (no model API is
reachable here); the HTTP client, the CLI, the runner and the files are the real ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from osmo_run.run.writing.records import OutputRecord
from tests.conftest import CLI, REPO, WriteJsonl, read_jsonl
from tests.graders.conftest import ScriptedJudge

KEY_VAR = "OSMO_RUN_TEST_JUDGE_KEY"
SECRET = "sk-judge-0123456789abcdef"


def _spec(tmp_path: Path, **fields: Any) -> Path:
    spec = {"workflow": "tests.graders.answer_workflows:AnswerWorkflow", "code_dir": str(REPO)}
    spec.update(fields)
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
    return path


def _rows(write_jsonl: WriteJsonl, count: int) -> Path:
    return write_jsonl(
        [{"id": f"row-{i}", "prompt": f"question {i}", "label": "Paris"} for i in range(count)]
    )


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_judged_run_shows_the_judges_tokens_apart_from_the_agents(
    cli: CLI,
    tmp_path: Path,
    write_jsonl: WriteJsonl,
    scripted_judge: ScriptedJudge,
    scripted_agent_model: ScriptedJudge,
    monkeypatch: pytest.MonkeyPatch,
    isolation: str,
) -> None:
    monkeypatch.setenv(KEY_VAR, SECRET)
    scripted_agent_model.script = ["Paris.", "Lyon."]
    # row-0 is judged at once; row-1's first reply has no grade line and is asked again
    scripted_judge.script = ["It names Paris.\nGRADE: C", "Hmm.", "It names Lyon.\nGRADE: I"]
    spec = _spec(
        tmp_path,
        workflow="tests.graders.answer_workflows:ModelAnswerWorkflow",
        grader="osmo_run.graders:ModelJudge",
        grader_config={"settings": {"rubric": "Names the capital of France."}},
        llm={"base_url": scripted_agent_model.base_url, "model": "agent-model"},
        judge={"base_url": scripted_judge.base_url, "model": "judge", "api_key_env": KEY_VAR},
        concurrency=1,  # the scripts answer in order
        isolation=isolation,
    )
    output = tmp_path / "out" / "results.jsonl"
    proc = cli("local", _rows(write_jsonl, 2), "--spec", spec, "-o", output, "--plain")
    assert proc.returncode == 0, proc.stderr
    rows = {row["row_id"]: row for row in read_jsonl(output)}
    for row in rows.values():
        OutputRecord.model_validate(row)
        assert row["usage"]["model_calls"] == 1  # the agent's one call, and only it
        assert row["info"]["grader"]["judge_model"] == "judge"
    assert [rows["row-0"]["reward"], rows["row-1"]["reward"]] == [1.0, 0.0]
    judge_calls = [rows[f"row-{i}"]["grader_usage"] for i in range(2)]
    assert [(u["model_calls"], u["prompt_tokens"], u["total_tokens"]) for u in judge_calls] == [
        (1, 50, 60),
        (2, 100, 120),
    ]
    summary = json.loads(output.with_name("results.summary.json").read_text())
    assert (summary["usage"]["model_calls"], summary["usage"]["total_tokens"]) == (2, 120)
    grader_usage = summary["grader_usage"]
    assert (grader_usage["model_calls"], grader_usage["total_tokens"]) == (3, 180)
    spread = grader_usage["per_rollout"]["total_tokens"]  # interpolated between 60 and 120
    assert spread == {"p50": 90.0, "p95": 117.0, "max": 120.0}
    printed = proc.stdout + proc.stderr
    assert "tokens         120 (100 prompt · 20 completion) in 2 model calls" in printed
    assert "grader tokens  180 (150 prompt · 30 completion) in 3 model calls" in printed
    assert "· 120 tokens (20 out) · " in printed and "· grader 180 tokens (30 out)" in printed
    # the key reached the judge, and only the judge; it is in no file and no output
    assert {h.get("Authorization") for h in scripted_judge.headers_seen} == {f"Bearer {SECRET}"}
    assert all("Authorization" not in h for h in scripted_agent_model.headers_seen)
    assert [body["model"] for body in scripted_judge.requests] == ["judge"] * 3
    leaking = [p for p in output.parent.rglob("*") if p.is_file() and SECRET in p.read_text()]
    assert leaking == [] and SECRET not in printed
    manifest = json.loads(output.with_name("results.manifest.json").read_text())
    assert manifest["defining"]["judge_model"] == "judge"
    assert manifest["info"]["judge_base_url"] == scripted_judge.base_url


def test_any_grader_reaches_the_judge_and_its_key_is_masked_in_the_row(
    cli: CLI,
    tmp_path: Path,
    write_jsonl: WriteJsonl,
    scripted_judge: ScriptedJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user's grader calls ``chat_completion()`` with no endpoint: the judge answers and
    the call is the row's grader usage; the key it wrote into its explanation is masked."""
    monkeypatch.setenv(KEY_VAR, SECRET)
    scripted_judge.script = ["yes"]
    spec = _spec(
        tmp_path,
        grader="tests.graders.answer_workflows:AskJudgeGrader",
        judge={"base_url": scripted_judge.base_url, "model": "judge", "api_key_env": KEY_VAR},
    )
    dataset = write_jsonl([{"id": "a", "prompt": "q", "label": "x", "metadata": {"answer": "4"}}])
    output = tmp_path / "results.jsonl"
    proc = cli("local", dataset, "--spec", spec, "-o", output)
    assert proc.returncode == 0, proc.stderr
    (row,) = read_jsonl(output)
    assert row["reward"] == 1.0
    assert row["info"]["grader"] == {"explanation": "the judge said 'yes'", "key_seen": "***"}
    assert row["usage"] is None and row["grader_usage"]["model_calls"] == 1


def test_a_model_judge_takes_its_endpoint_from_the_judge_section(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl, scripted_judge: ScriptedJudge
) -> None:
    """With a judge section, ModelJudge settings need no endpoint (without one, the run
    stops: tests/graders/test_cli.py)."""
    scripted_judge.script = ["Right.\nGRADE: C"]
    spec = _spec(
        tmp_path,
        grader="osmo_run.graders:ModelJudge",
        judge={"base_url": scripted_judge.base_url, "model": "from-the-section"},
    )
    dataset = write_jsonl([{"id": "a", "prompt": "q", "label": "4", "metadata": {"answer": "4"}}])
    output = tmp_path / "results.jsonl"
    assert cli("validate", spec, dataset).returncode == 0
    proc = cli("local", dataset, "--spec", spec, "-o", output)
    assert proc.returncode == 0, proc.stderr
    (row,) = read_jsonl(output)
    assert row["reward"] == 1.0
    assert row["info"]["grader"]["judge_model"] == "from-the-section"


@pytest.mark.parametrize(
    ("judge", "error"),
    [
        (
            {"model": "m"},
            "field 'judge': Value error, needs base_url and model (or `judge: embedded` for "
            "the bundled model)",
        ),
        (
            {"base_url": "http://127.0.0.1:9/v1"},
            "field 'judge': Value error, needs base_url and model (or `judge: embedded` for "
            "the bundled model)",
        ),
        (
            {"embedded": True, "base_url": "http://127.0.0.1:9/v1"},
            "field 'judge': Value error, embedded starts its own server: remove base_url and "
            "api_key_env",
        ),
        (
            "remote",
            "field 'judge': Value error, is a mapping with base_url and model, or the word "
            "embedded",
        ),
        (
            {"base_url": "127.0.0.1:9", "model": "m"},
            "field 'judge.base_url': Value error, must start with http:// or https:// "
            "(got '127.0.0.1:9')",
        ),
        ({"base_url": "http://h/v1", "model": "m", "key": "k"}, "field 'judge.key': unknown field"),
    ],
)
def test_a_judge_section_without_an_endpoint_stops_the_run_before_any_row(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl, judge: Any, error: str
) -> None:
    spec = _spec(tmp_path, grader="osmo_run.graders:ModelJudge", judge=judge)
    output = tmp_path / "out" / "results.jsonl"
    proc = cli("local", _rows(write_jsonl, 1), "--spec", spec, "-o", output)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"error: {spec}: {error}"
    assert not output.parent.exists()


def test_an_unset_judge_key_variable_stops_the_run_naming_it(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    judge = {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "OSMO_RUN_UNSET_X"}
    spec = _spec(tmp_path, grader="osmo_run.graders:ModelJudge", judge=judge)
    output = tmp_path / "out" / "results.jsonl"
    proc = cli("local", _rows(write_jsonl, 1), "--spec", spec, "-o", output)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "error: judge.api_key_env: environment variable OSMO_RUN_UNSET_X is not set; export "
        "it or remove api_key_env"
    )
    assert not output.parent.exists()
