"""Built-in graders inside real Harbor trials (Docker): the runtime staged into each trial
carries ``osmo_run.graders``, the spec's judge section reaches a grader in the trial (a
loopback judge through the relay, its key through the verifier's environment), the
judge's tokens come back as the row's ``grader_usage``, and a grader whose optional
library is missing from the trial's image fails its rows naming it, while the host does
not demand that library for a harbor run.

The judge is a scripted endpoint on the host's 127.0.0.1 (no model API is reachable);
Harbor, Docker, the trial image and the runner inside it are the real ones.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from osmo_run.run.writing.records import OutputRecord
from tests.conftest import CLI, read_jsonl
from tests.graders.conftest import ScriptedJudge
from tests.harbor.conftest import (
    cli_env,
    docker_engine,
    harbor_spec,
    run_harbor,
    write_inputs,
)

__all__ = ["docker_engine"]  # the session fixture that skips (or fails in CI) without Docker

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.usefixtures("docker_engine")]
KEY_VAR = "OSMO_RUN_TEST_TRIAL_JUDGE_KEY"
SECRET = "sk-trial-judge-9f8e7d6c5b4a"


def _row(row_id: str, answer: str, label: str) -> dict[str, Any]:
    return {"id": row_id, "prompt": "What is it?", "label": label, "metadata": {"answer": answer}}


def test_built_in_graders_and_the_judge_section_work_inside_trials(
    tmp_path: Path, scripted_judge: ScriptedJudge
) -> None:
    scripted_judge.script = ["Twelve hundred is 1200.\nGRADE: C"]
    parts = [{"grader": "NumericMatch"}, {"grader": "ModelJudge"}]  # the judge only if needed
    spec = harbor_spec(
        grader="osmo_run.graders:AnyOf",
        grader_config={"settings": {"graders": parts}},
        judge={"base_url": scripted_judge.base_url, "model": "judge", "api_key_env": KEY_VAR},
        timeouts={"agent_sec": 30, "grader_sec": 30},
    )
    rows = [
        _row("number", "The total is 1,234.", "1234"),
        _row("judged", "It is twelve hundred.", "1200"),
    ]
    env = {**cli_env(), KEY_VAR: SECRET}
    run = run_harbor(tmp_path, rows, spec, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    for row in run.rows.values():
        OutputRecord.model_validate(row)
    number, judged = run.rows["number"], run.rows["judged"]
    assert (number["reward"], judged["reward"]) == (1.0, 1.0)
    assert number["info"]["grader"]["parts"][0]["explanation"] == (
        "last number of the answer, 1,234 = 1234, matches label 1234 (exactly)"
    )
    assert number["grader_usage"] is None  # NumericMatch passed: no judge call
    first, second = judged["info"]["grader"]["parts"]
    assert (first["grader"], first["reward"], second["grader"]) == (
        "NumericMatch",
        0.0,
        "ModelJudge",
    )
    assert second["reasoning"] == "Twelve hundred is 1200."
    usage = judged["grader_usage"]  # counted inside the trial, apart from the workflow's
    assert (usage["model_calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (1, 50, 10)
    assert run.summary["grader_usage"]["model_calls"] == 1
    assert scripted_judge.headers_seen[0]["Authorization"] == f"Bearer {SECRET}"
    files = [path for path in run.out_dir.rglob("*") if path.is_file()]
    assert [str(p) for p in files if SECRET.encode() in p.read_bytes()] == []
    assert SECRET not in run.stdout + run.stderr
    assert run.leftovers == []


def test_a_missing_extra_is_not_demanded_on_the_host_and_named_by_the_trial(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This host lacks math-verify (as if not installed); the trial's image may have it, so
    the run goes on. This image has not, and each row says so in the grader phase."""
    monkeypatch.setitem(sys.modules, "math_verify", None)
    spec = harbor_spec(
        grader="osmo_run.graders:MathEquivalence", timeouts={"agent_sec": 30, "grader_sec": 30}
    )
    args = write_inputs(tmp_path, [_row("half", "\\frac{1}{2}", "0.5")], spec)
    dataset, _, spec_file = args
    validated = cli("validate", spec_file, dataset, "--harbor")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    output = tmp_path / "out" / "results.jsonl"
    proc = cli("harbor", *args, "-o", output, "--display", "plain", timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = read_jsonl(output)
    assert (row["status"], row["error_phase"]) == ("failure", "grader")
    assert (
        "MathEquivalence needs math-verify, which is not installed where the grader runs"
        in (row["error_message"])
    )
    assert (
        "in a Harbor trial: add it to the spec's requirements, "
        "`requirements: {add: [math-verify]}`, or install it in the task's image"
    ) in row["error_message"]


def test_an_extra_given_as_a_requirement_is_installed_in_the_trial_and_grades(
    tmp_path: Path,
) -> None:
    """The error above says how to fix it: with math-verify among the spec's requirements
    (resolved on the host for the image's Python, issue 13's path), MathEquivalence grades
    inside the trial, which has no math-verify of its own."""
    spec = harbor_spec(
        grader="osmo_run.graders:MathEquivalence",
        timeouts={"agent_sec": 60, "grader_sec": 60},
        requirements={"add": ["math-verify"]},
    )
    rows = [_row("half", "\\frac{1}{2}", "0.5"), _row("third", "\\boxed{0.5}", "1/3")]
    run = run_harbor(tmp_path, rows, spec, env=cli_env(), timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr  # no gate: a wrong answer is reward 0
    half, third = run.rows["half"], run.rows["third"]
    assert (half["status"], half["reward"]) == ("success", 1.0), half.get("error_message")
    assert (third["status"], third["reward"]) == ("success", 0.0), third.get("error_message")
    assert run.leftovers == []


def test_a_backtracking_regex_inside_a_trial_is_a_grader_timeout(tmp_path: Path) -> None:
    """The trial's grader kills its worker process at the grader deadline (issue 27)."""
    spec = harbor_spec(
        grader="osmo_run.graders:RegexMatch",
        grader_config={"settings": {"pattern": "^(\\w+\\s?)*$", "compare": "found"}},
        timeouts={"agent_sec": 60, "grader_sec": 10},
    )
    rows = [_row("pathological", "a" * 40 + "!", "x"), _row("words", "a few words", "x")]
    run = run_harbor(tmp_path, rows, spec, env=cli_env(), timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    stuck, words = run.rows["pathological"], run.rows["words"]
    assert (stuck["status"], stuck["error_category"], stuck["error_phase"]) == (
        "failure",
        "timeout",
        "grader",
    ), stuck["error_message"]
    assert "grader exceeded its 10s deadline" in stuck["error_message"]
    assert (words["status"], words["reward"]) == ("success", 1.0), words.get("error_message")
    assert run.leftovers == []
