"""``osmo-run regrade`` with built-in graders: settings from ``--grader-settings`` or a
spec (whose judge section makes a judge regrade work), checked before anything is
written, and the judge's tokens and key handled as in a run.

The judge is a scripted OpenAI-compatible endpoint on 127.0.0.1 (no model API is
reachable here); the CLI, the files and the HTTP client are the real ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from osmo_run.run.writing.records import OutputRecord
from tests.conftest import CLI, REPO, WriteJsonl, read_jsonl
from tests.graders.conftest import ScriptedJudge

KEY_VAR = "OSMO_RUN_TEST_REGRADE_JUDGE_KEY"
SECRET = "sk-regrade-judge-55aa55aa"


def _write_spec(path: Path, **fields: Any) -> Path:
    spec = {"workflow": "tests.graders.answer_workflows:AnswerWorkflow", "code_dir": str(REPO)}
    spec.update(fields)
    path.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
    return path


@pytest.fixture
def numeric_run(cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl) -> Path:
    """A finished run graded by NumericMatch: one right, one wrong answer."""
    dataset = write_jsonl(
        [
            {"id": "right", "prompt": "2+2?", "label": "4", "metadata": {"answer": "It is 4."}},
            {"id": "wrong", "prompt": "2+3?", "label": "5", "metadata": {"answer": "Six."}},
        ]
    )
    spec = _write_spec(tmp_path / "run.yaml", grader="osmo_run.graders:NumericMatch")
    output = tmp_path / "runs" / "first" / "results.jsonl"
    proc = cli("local", dataset, "--spec", spec, "-o", output)
    assert proc.returncode == 0, proc.stderr
    return output.parent


def _regraded(run_dir: Path) -> dict[str, dict[str, Any]]:
    (results,) = run_dir.parent.glob(f"{run_dir.name}-regrade-*/results.jsonl")
    return {row["row_id"]: row for row in read_jsonl(results)}


def test_a_spec_with_a_judge_section_regrades_with_a_model_judge(
    cli: CLI,
    tmp_path: Path,
    numeric_run: Path,
    scripted_judge: ScriptedJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_VAR, SECRET)
    scripted_judge.respond = lambda body: (
        "Four is right.\nGRADE: C" if "It is 4." in str(body) else "Six is not five.\nGRADE: I"
    )
    judge_spec = _write_spec(
        tmp_path / "judge.yaml",
        grader="osmo_run.graders:ModelJudge",
        grader_config={"settings": {"rubric": "The number is right.", "max_tokens": 64}},
        judge={"base_url": scripted_judge.base_url, "model": "judge", "api_key_env": KEY_VAR},
    )
    proc = cli("regrade", numeric_run, "--spec", judge_spec)
    assert proc.returncode == 0, proc.stderr
    rows = _regraded(numeric_run)
    for row in rows.values():
        OutputRecord.model_validate(row)
        assert row["grader_usage"]["model_calls"] == 1
        assert row["info"]["grader"]["judge_model"] == "judge"
    assert (rows["right"]["reward"], rows["wrong"]["reward"]) == (1.0, 0.0)
    assert {body["max_tokens"] for body in scripted_judge.requests} == {64}  # the spec's
    assert scripted_judge.headers_seen[0]["Authorization"] == f"Bearer {SECRET}"
    (regrade_dir,) = numeric_run.parent.glob("first-regrade-*")
    manifest = json.loads((regrade_dir / "results.manifest.json").read_text())
    assert manifest["defining"]["grader"] == "osmo_run.graders:ModelJudge"
    assert manifest["defining"]["judge_model"] == "judge"
    summary = json.loads((regrade_dir / "results.summary.json").read_text())
    assert summary["grader_usage"]["model_calls"] == 2 and summary["usage"] is None
    assert "grader tokens" in proc.stdout
    files = [p for p in regrade_dir.rglob("*") if p.is_file()]
    assert [p for p in files if SECRET in p.read_text()] == [] and SECRET not in proc.stdout


def test_grader_settings_as_json_regrade_with_their_own_endpoint(
    cli: CLI, numeric_run: Path, scripted_judge: ScriptedJudge
) -> None:
    scripted_judge.respond = lambda body: "ok\nSCORE: 10" if "It is 4." in str(body) else "SCORE: 2"
    settings = json.dumps(scripted_judge.settings(scale="number"))
    grader = "osmo_run.graders:ModelJudge"
    proc = cli("regrade", numeric_run, "--grader", grader, "--grader-settings", settings)
    assert proc.returncode == 0, proc.stderr
    rows = _regraded(numeric_run)
    assert (rows["right"]["reward"], rows["wrong"]["reward"]) == (1.0, 0.2)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--grader", "osmo_run.graders:NumericMatch", "--grader-settings", '{"abs_tol": -1}'],
            "error: grader_config.settings.abs_tol: must be at least 0, got -1.0 "
            "(osmo_run.graders:NumericMatch)",
        ),
        (
            ["--grader", "osmo_run.graders:ModelJudge"],
            "error: grader_config.settings.base_url: the judge has no endpoint: add a judge "
            "section to the run spec (base_url and model, or `judge: embedded`), or set "
            "base_url and model in the grader's settings (osmo_run.graders:ModelJudge)",
        ),
        (
            ["--grader-settings", "[1, 2]"],
            "error: --grader-settings: must be a JSON object of settings, got list",
        ),
        (
            ["--grader-settings", "{abs_tol: 1}"],
            "error: --grader-settings: not JSON (Expecting property name enclosed in double "
            "quotes: line 1 column 2 (char 1)); pass an object",
        ),
        (
            ["--grader-settings", '{"abs_tolerance": 1}'],
            "error: grader_config.settings.abs_tolerance: unknown setting; did you mean "
            "'abs_tol'? (osmo_run.graders:NumericMatch)",
        ),
    ],
)
def test_bad_regrade_settings_stop_before_anything_is_written(
    cli: CLI, numeric_run: Path, args: list[str], error: str
) -> None:
    proc = cli("regrade", numeric_run, *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == error
    assert list(numeric_run.parent.glob("first-regrade-*")) == []


def test_without_flags_the_runs_own_grader_and_settings_regrade(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    dataset = write_jsonl([{"id": "a", "prompt": "q", "label": "10", "metadata": {"answer": "9"}}])
    spec = _write_spec(
        tmp_path / "run.yaml",
        grader="osmo_run.graders:NumericMatch",
        grader_config={"settings": {"abs_tol": 1}},
    )
    output = tmp_path / "runs" / "first" / "results.jsonl"
    assert cli("local", dataset, "--spec", spec, "-o", output).returncode == 0
    proc = cli("regrade", output.parent)
    assert proc.returncode == 0, proc.stderr
    assert _regraded(output.parent)["a"]["reward"] == 1.0  # within the run's abs_tol of 1
