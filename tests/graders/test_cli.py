"""Built-in graders named in a spec, through the real ``osmo-run``: bad names and settings
stop the run before any row (exit 2, one line, nothing written), and a run's rows carry
each grader's explanation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from osmo_run.run.writing.records import OutputRecord
from tests.conftest import CLI, REPO, WriteJsonl, read_jsonl

WORKFLOW = "tests.graders.answer_workflows:AnswerWorkflow"


def _spec(tmp_path: Path, grader: str, settings: dict[str, Any] | None = None) -> Path:
    spec: dict[str, Any] = {"workflow": WORKFLOW, "grader": grader, "code_dir": str(REPO)}
    if settings is not None:
        spec["grader_config"] = {"settings": settings}
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
    return path


def _rows(write_jsonl: WriteJsonl, *answers: tuple[Any, str]) -> Path:
    return write_jsonl(
        [
            {"id": f"row-{i}", "prompt": "What is it?", "label": label, "metadata": {"answer": a}}
            for i, (label, a) in enumerate(answers)
        ]
    )


@pytest.mark.parametrize(
    ("grader", "settings", "error"),
    [
        (
            "osmo_run.graders:NumercMatch",
            None,
            "error: grader: module 'osmo_run.graders' has no attribute 'NumercMatch'; "
            "did you mean 'NumericMatch'?",
        ),
        (
            "osmo_run.graders:NumericMatch",
            {"abs_tol": "a tenth"},
            "error: grader_config.settings.abs_tol: must be a number, got str 'a tenth' "
            "(osmo_run.graders:NumericMatch)",
        ),
        (
            "osmo_run.graders:NumericMatch",
            {"abs_tolerance": 0.1},
            "error: grader_config.settings.abs_tolerance: unknown setting; did you mean "
            "'abs_tol'? (osmo_run.graders:NumericMatch)",
        ),
        (
            "osmo_run.graders:RegexMatch",
            {"pattern": "ANSWER: ([A-D]"},
            "error: grader_config.settings.pattern: does not compile: missing ), unterminated "
            "subpattern at position 8 (osmo_run.graders:RegexMatch)",
        ),
        (
            "osmo_run.graders:ModelJudge",
            {"rubric": "Is it right?"},
            "error: grader_config.settings.base_url: the judge has no endpoint: add a judge "
            "section to the run spec (base_url and model, or `judge: embedded`), or set "
            "base_url and model in the grader's settings (osmo_run.graders:ModelJudge)",
        ),
        (
            "osmo_run.graders:AnyOf",
            {"graders": [{"grader": "ExactMatch"}, {"grader": "ModelJudge"}]},
            "error: grader_config.settings.graders[1].settings.base_url: the judge has no "
            "endpoint: add a judge section to the run spec (base_url and model, or "
            "`judge: embedded`), or set base_url and model in the grader's settings "
            "(osmo_run.graders:AnyOf)",
        ),
        (
            "osmo_run.graders:AllOf",
            {"graders": [{"grader": "ExactMatch"}, {"grader": "Include"}]},
            "error: grader_config.settings.graders[1].grader: 'Include' is not a built-in grader; "
            "did you mean 'Includes'? (osmo_run.graders:AllOf)",
        ),
    ],
)
def test_bad_grader_input_stops_the_run_before_any_row(
    cli: CLI,
    tmp_path: Path,
    write_jsonl: WriteJsonl,
    grader: str,
    settings: dict[str, Any] | None,
    error: str,
) -> None:
    dataset = _rows(write_jsonl, ("5", "5"))
    output = tmp_path / "out" / "results.jsonl"
    proc = cli("local", dataset, "--spec", _spec(tmp_path, grader, settings), "-o", output)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == error
    assert not output.parent.exists()  # nothing ran, nothing was written
    validated = cli("validate", _spec(tmp_path, grader, settings), dataset)
    assert validated.returncode == 2
    assert error.replace("error: ", "problem: ") in validated.stdout + validated.stderr


def test_a_run_keeps_each_graders_explanation_in_its_row(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    dataset = _rows(
        write_jsonl,
        ("1,234", "The total is 1234."),
        (-3, "x = \u22123"),
        ("152", "75 + 76 = 151"),
        ("two", "2"),  # a label NumericMatch cannot read
    )
    output = tmp_path / "results.jsonl"
    spec = _spec(tmp_path, "osmo_run.graders:NumericMatch", {"abs_tol": 1e-6})
    proc = cli("local", dataset, "--spec", spec, "-o", output, "--display", "plain")
    assert proc.returncode == 1, proc.stderr
    rows = {row["row_id"]: row for row in read_jsonl(output)}
    for row in rows.values():
        OutputRecord.model_validate(row)
    assert [rows[f"row-{i}"]["reward"] for i in range(3)] == [1.0, 1.0, 0.0]
    assert rows["row-2"]["info"]["grader"]["explanation"] == (
        "last number of the answer, 151, does not match label 152 (abs_tol 1e-06)"
    )
    failed = rows["row-3"]
    assert (failed["status"], failed["error_category"], failed["error_phase"]) == (
        "failure",
        "validation_error",
        "grader",
    )
    assert "NumericMatch: the label 'two' is not a number" in failed["error_message"]


def test_explanations_come_back_from_a_child_process(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    """``--isolation process`` grades in a child: the explanation travels with the result."""
    dataset = _rows(write_jsonl, ("Paris", "The capital is Paris."))
    output = tmp_path / "results.jsonl"
    spec = _spec(tmp_path, "osmo_run.graders:Includes")
    proc = cli("local", dataset, "--spec", spec, "-o", output, "--isolation", "process")
    assert proc.returncode == 0, proc.stderr
    (row,) = read_jsonl(output)
    assert row["reward"] == 1.0
    assert row["info"]["grader"] == {
        "explanation": "answer 'the capital is paris.' contains label 'paris' as whole words at 15"
    }


def test_a_users_grader_checks_its_own_settings_before_any_row(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    """``Grader.validate_settings`` is the mechanism the built-ins use; any grader has it."""
    dataset = _rows(write_jsonl, ("x", "y"))
    grader = "tests.graders.answer_workflows:PickyGrader"
    output = tmp_path / "out" / "results.jsonl"
    proc = cli("local", dataset, "--spec", _spec(tmp_path, grader, {"mode": "lax"}), "-o", output)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"error: grader_config.settings: mode must be 'strict' or 'lenient', got 'lax' ({grader})"
    )
    assert not output.parent.exists()


def test_an_explanation_is_kept_when_grading_then_fails_and_replaced_by_a_regrade(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    dataset = write_jsonl(
        [
            {"id": "ok", "prompt": "q", "label": "5", "metadata": {"answer": "it is 5"}},
            {"id": "boom", "prompt": "q", "label": "5", "metadata": {"answer": "5", "explode": 1}},
        ]
    )
    grader = "tests.graders.answer_workflows:PickyGrader"
    output = tmp_path / "run" / "results.jsonl"
    spec = _spec(tmp_path, grader, {"mode": "strict"})
    proc = cli("local", dataset, "--spec", spec, "-o", output, "--display", "plain")
    assert proc.returncode == 1, proc.stderr
    rows = {row["row_id"]: row for row in read_jsonl(output)}
    boom = rows["boom"]
    assert (boom["status"], boom["error_category"], boom["error_phase"]) == (
        "failure",
        "agent_error",
        "grader",
    )
    assert boom["info"]["grader"] == {"explanation": "looked at the answer", "mode": "strict"}
    regraded = cli("regrade", output, "--grader", "osmo_run.graders:NumericMatch")
    assert regraded.returncode == 0, regraded.stderr
    (results,) = tmp_path.glob("run-regrade-*/results.jsonl")
    again = {row["row_id"]: row for row in read_jsonl(results)}
    assert again["boom"]["reward"] == 1.0
    assert again["boom"]["info"]["grader"] == {
        "explanation": "last number of the answer, 5, matches label 5 (exactly)",
        "answer_number": 5.0,
    }
