"""AllOf, AnyOf and WeightedSum: their rewards, what they explain, where they stop, and
how a part's settings and errors surface."""

from __future__ import annotations

from typing import Any

import pytest

from osmo_run import ErrorCategory, Phase, RolloutStatus
from osmo_run.graders import AllOf, AnyOf, WeightedSum
from osmo_run.graders.settings import SettingsError
from tests.graders.conftest import ScriptedJudge, explanation, grade

JSON_PARTS = [{"grader": "JsonValid"}, {"grader": "JsonEquals"}]


@pytest.mark.parametrize(
    ("answer", "reward", "said"),
    [
        ('{"a": 1}', 1.0, "AllOf: all 2 parts passed: JsonValid 1 ("),
        ('{"a": 2}', 0.0, "AllOf: part 2 of 2 failed: JsonEquals 0 (the whole answer differs"),
        ("no json", 0.0, "AllOf: part 1 of 2 failed: JsonValid 0 (the answer is not JSON"),
    ],
)
def test_all_of(answer: str, reward: float, said: str) -> None:
    result = grade(AllOf, '{"a": 1}', answer, {"graders": JSON_PARTS})
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward
    assert explanation(result).startswith(said)
    parts = result.info["grader"]["parts"]
    assert [p["grader"] for p in parts] == ["JsonValid", "JsonEquals"][: len(parts)]
    assert len(parts) == (1 if answer == "no json" else 2)  # stops at the first failure


def test_any_of_stops_at_the_first_pass_and_calls_no_judge(scripted_judge: ScriptedJudge) -> None:
    parts = [
        {"grader": "NumericMatch"},
        {"grader": "ModelJudge", "settings": scripted_judge.settings()},
    ]
    passed = grade(AnyOf, 42, "It is 42.", {"graders": parts})
    assert passed.reward == 1.0
    assert scripted_judge.requests == []
    assert explanation(passed).startswith("AnyOf: part 1 of 2 passed: NumericMatch 1")
    scripted_judge.script = ["Wrong number.\nGRADE: I"]
    failed = grade(AnyOf, 42, "It is 41.", {"graders": parts})
    assert failed.reward == 0.0
    assert len(scripted_judge.requests) == 1
    judged = failed.info["grader"]["parts"][1]
    assert (judged["grader"], judged["reward"], judged["reasoning"]) == (
        "ModelJudge",
        0.0,
        "Wrong number.",
    )


def test_weighted_sum_grades_every_part() -> None:
    parts = [
        {"grader": "ExactMatch", "weight": 0.3},
        {"grader": "NumericMatch", "weight": 0.7},
    ]
    result = grade(WeightedSum, "42", "It is 42", {"graders": parts})
    assert result.reward == pytest.approx(0.7)
    assert explanation(result).startswith("WeightedSum: (0.3 x ExactMatch 0 (answer 'it is 42'")
    normalized = grade(
        WeightedSum,
        "42",
        "It is 42",
        {
            "graders": [{"grader": "Includes", "weight": 3}, {"grader": "ExactMatch"}],
            "normalize": True,
        },
    )
    assert normalized.reward == pytest.approx(0.75)


def test_parts_may_be_any_grader_and_combinations_nest() -> None:
    inner = {
        "grader": "AnyOf",
        "settings": {"graders": [{"grader": "ExactMatch"}, {"grader": "Includes"}]},
    }
    parts = [inner, {"grader": "osmo_run.graders:NumericMatch", "settings": {"abs_tol": 0.5}}]
    result = grade(AllOf, "42", "The answer: 42 (42.3 before rounding)", {"graders": parts})
    assert result.reward == 1.0, explanation(result)
    assert result.info["grader"]["parts"][0]["parts"][1]["grader"] == "Includes"


def test_a_part_that_fails_fails_the_row_with_its_category(scripted_judge: ScriptedJudge) -> None:
    scripted_judge.script = [429]
    parts = [
        {"grader": "Includes"},
        {"grader": "ModelJudge", "settings": scripted_judge.settings()},
    ]
    result = grade(WeightedSum, "Paris", "Paris", {"graders": parts})
    assert result.status is RolloutStatus.FAILURE
    assert (result.error_category, result.error_phase) == (ErrorCategory.RATE_LIMIT, Phase.GRADER)
    assert explanation(result) == "WeightedSum: ModelJudge (part 2) raised"
    assert [p["grader"] for p in result.info["grader"]["parts"]] == ["Includes"]
    wrong_label = grade(AllOf, {"x": 1}, "Paris", {"graders": [{"grader": "ExactMatch"}]})
    assert wrong_label.error_category is ErrorCategory.VALIDATION_ERROR


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({}, "settings.graders: required setting is missing"),
        ({"graders": []}, "settings.graders: needs at least one grader"),
        (
            {"graders": [{"grader": "NumercMatch"}]},
            "settings.graders[0].grader: 'NumercMatch' is not a built-in grader; "
            "did you mean 'NumericMatch'?",
        ),
        (
            {
                "graders": [
                    {"grader": "ExactMatch"},
                    {"grader": "NumericMatch", "settings": {"abs_tol": -1}},
                ]
            },
            "settings.graders[1].settings.abs_tol: must be at least 0, got -1.0",
        ),
        (
            {"graders": [{"grader": "RegexMatch", "settings": {"pattern": "("}}]},
            "settings.graders[0].settings.pattern: does not compile",
        ),
        (
            {"graders": [{"grader": "ExactMatch", "wieght": 2}]},
            "settings.graders[0].wieght: unknown setting; did you mean 'weight'?",
        ),
        (
            {"graders": [{"grader": "osmo_run.graders:Nope"}]},
            "settings.graders[0].grader: module 'osmo_run.graders' has no attribute 'Nope'",
        ),
        (
            {
                "graders": [
                    {
                        "grader": "ModelJudge",
                        "settings": {"base_url": "http://h/v1", "model": "m", "max_tokens": 0},
                    }
                ]
            },
            "settings.graders[0].settings.max_tokens: must be at least 1, got 0",
        ),
        (
            {"graders": [{"grader": "ExactMatch", "weight": 0}], "normalize": True},
            "settings.graders: the weights sum to 0",
        ),
    ],
)
def test_part_settings_are_checked_with_their_path(settings: dict[str, Any], problem: str) -> None:
    with pytest.raises(SettingsError) as raised:
        WeightedSum.validate_settings(settings)
    assert str(raised.value).startswith(problem)


@pytest.mark.parametrize(
    ("settings", "path"),
    [
        ({"graders": [{"grader": "ExactMatch"}]}, None),
        (
            {"graders": [{"grader": "ExactMatch"}, {"grader": "ModelJudge"}]},
            "graders[1].settings.base_url",
        ),
        (
            {"graders": [{"grader": "AnyOf", "settings": {"graders": [{"grader": "ModelJudge"}]}}]},
            "graders[0].settings.graders[0].settings.base_url",
        ),
        (
            {
                "graders": [
                    {"grader": "ModelJudge", "settings": {"base_url": "http://h/v1", "model": "m"}}
                ]
            },
            None,
        ),
    ],
)
def test_a_judge_part_without_an_endpoint_is_found_with_its_path(
    settings: dict[str, Any], path: str | None
) -> None:
    """The spec's judge section must name the endpoint such a part lacks (see
    tests/graders/test_judge_section.py for the run that stops when it does not)."""
    assert WeightedSum.needs_judge(settings) == path
