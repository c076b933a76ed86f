"""ExactMatch, Includes, RegexMatch and TokenF1 against tables of answers, the hard ones
included (Unicode case folding and NFKC, whitespace, punctuation, articles)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from osmo_run import (
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    Phase,
    RolloutSample,
    RolloutStatus,
)
from osmo_run.graders import ExactMatch, Includes, RegexMatch, TokenF1
from osmo_run.graders.settings import SettingsError
from osmo_run.sdk.config import GraderConfig
from osmo_run.sdk.rollout import run_grader_phase
from tests.graders.conftest import explanation, grade

EXACT: list[tuple[dict[str, Any], Any, str, float]] = [
    ({}, "Paris", "Paris", 1.0),
    ({}, "Paris", "  paris \n", 1.0),  # case and surrounding whitespace
    ({}, "New York", "new   york", 1.0),  # runs of whitespace collapse
    ({}, "Paris", "Paris.", 0.0),  # punctuation counts unless ignored
    ({"ignore_punctuation": True}, "Paris", "Paris.", 1.0),
    ({"ignore_punctuation": True}, "Paris", "«Paris»!", 1.0),  # Unicode punctuation too
    ({}, "STRASSE", "Straße", 1.0),  # case folding, not lower()
    ({}, "ABC", "ＡＢＣ", 1.0),  # full-width letters, through NFKC
    ({"unicode_nfkc": False}, "ABC", "ＡＢＣ", 0.0),
    ({}, "file", "ﬁle", 1.0),  # the fi ligature
    ({}, "café", "cafe", 0.0),  # accents are letters, not noise
    ({"ignore_case": False}, "Paris", "paris", 0.0),
    ({"whitespace": "remove"}, "1 000", "1000", 1.0),
    ({"whitespace": "keep"}, "a b", "a  b", 0.0),
    ({"ignore_articles": True}, "Eiffel Tower", "The Eiffel Tower", 1.0),
    ({"ignore_articles": True}, "theatre", "theatre", 1.0),  # only whole words are articles
    ({}, ["Paris", "Paris, France"], "paris, france", 1.0),  # any of a list of labels
    ({}, 64, "64", 1.0),  # a number label as written in JSON
    ({}, 0.5, "0.50", 0.0),  # exact is exact: NumericMatch compares numbers
]


@pytest.mark.parametrize(("settings", "label", "answer", "reward"), EXACT)
def test_exact_match(settings: dict[str, Any], label: Any, answer: str, reward: float) -> None:
    result = grade(ExactMatch, label, answer, settings)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward
    verb = "equals" if reward else "differs from"
    assert verb in explanation(result)


def test_exact_match_explains_what_it_compared() -> None:
    result = grade(ExactMatch, "Paris", "Lyon.")
    assert explanation(result) == "answer 'lyon.' differs from label 'paris' (normalised)"


INCLUDES: list[tuple[dict[str, Any], Any, str, float]] = [
    ({}, "Paris", "The capital is Paris.", 1.0),
    ({}, "paris", "THE CAPITAL IS PARIS", 1.0),
    ({}, "4", "The answer is 14.", 0.0),  # not inside a longer number
    ({"whole_words": False}, "4", "The answer is 14.", 1.0),
    ({}, "Paris", "Parisian cafés", 0.0),
    ({}, "C++", "I like C++.", 1.0),  # a label ending in punctuation
    ({}, "4", "4", 1.0),
    ({}, ["Lyon", "Paris"], "It is Paris", 1.0),
    ({}, "Köln", "Ich wohne in KÖLN.", 1.0),
]


@pytest.mark.parametrize(("settings", "label", "answer", "reward"), INCLUDES)
def test_includes(settings: dict[str, Any], label: Any, answer: str, reward: float) -> None:
    result = grade(Includes, label, answer, settings)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward
    assert ("contains" if reward else "does not contain") in explanation(result)


REGEX: list[tuple[dict[str, Any], Any, str, float]] = [
    ({"pattern": r"ANSWER:\s*(\w+)"}, "B", "ANSWER: A, no wait, ANSWER: b", 1.0),  # last match
    ({"pattern": r"ANSWER:\s*(\w+)", "occurrence": "first"}, "B", "ANSWER: A ANSWER: B", 0.0),
    ({"pattern": r"ANSWER:\s*(\w+)", "ignore_case": False}, "B", "answer: B", 0.0),
    (
        {"pattern": r"(?P<city>[A-Z]\w+) is the capital", "group": "city"},
        "Paris",
        "Paris is the capital",
        1.0,
    ),
    ({"pattern": r"final: (\d+) (\d+)", "group": 2}, "7", "final: 3 7", 1.0),
    ({"pattern": r"\d+"}, "42", "it is 42", 1.0),  # no group: the whole match
    ({"pattern": r"\bDONE\b", "compare": "found"}, "unused", "all DONE now", 1.0),
    ({"pattern": r"ANSWER:\s*(\w+)"}, "B", "I do not know", 0.0),
    ({"pattern": r"答案：(\S+)"}, "巴黎", "答案：巴黎", 1.0),  # full-width colon, Chinese text
]


@pytest.mark.parametrize(("settings", "label", "answer", "reward"), REGEX)
def test_regex_match(settings: dict[str, Any], label: Any, answer: str, reward: float) -> None:
    result = grade(RegexMatch, label, answer, settings)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward


def test_regex_match_explains_a_missing_match() -> None:
    result = grade(RegexMatch, "B", "no idea", {"pattern": r"ANSWER: (\w)"})
    assert explanation(result) == "pattern 'ANSWER: (\\\\w)' not found in 'no idea'"


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"pattern": "(unclosed"}, "settings.pattern: does not compile: missing ), unterminated"),
        ({}, "settings.pattern: required setting is missing"),
        ({"pattern": "(a)", "group": 2}, "settings.group: the pattern has 1 groups; 2 is not one"),
        ({"pattern": "(a)", "group": "x"}, "settings.group: no group named 'x'"),
        (
            {"pattern": "a", "ocurrence": "last"},
            "settings.ocurrence: unknown setting; did you mean 'occurrence'?",
        ),
        (
            {"pattern": "a", "compare": "labels"},
            "settings.compare: must be one of 'label', 'found', got 'labels'; "
            "did you mean 'label'?",
        ),
        ({"pattern": 7}, "settings.pattern: must be a string, got int 7"),
    ],
)
def test_regex_settings_are_checked(settings: dict[str, Any], problem: str) -> None:
    with pytest.raises(SettingsError) as raised:
        RegexMatch.validate_settings(settings)
    assert str(raised.value).startswith(problem)


F1: list[tuple[dict[str, Any], Any, str, float]] = [
    ({}, "the cat sat", "a cat sat", 1.0),  # articles and case are SQuAD's noise
    ({}, "cat sat", "cat sat down", 0.8),  # precision 2/3, recall 1
    ({}, "cat", "dog", 0.0),
    ({}, "Cat, sat!", "cat sat", 1.0),
    ({}, ["dog", "cat sat"], "cat sat down", 0.8),  # the best label counts
    ({}, "a a b", "a b b", 2 / 3),  # repeated tokens count as often as both hold them
    ({"ignore_articles": False}, "the cat", "cat", 2 / 3),
    ({}, "Ｃａｔ", "cat", 1.0),
]


@pytest.mark.parametrize(("settings", "label", "answer", "reward"), F1)
def test_token_f1(settings: dict[str, Any], label: Any, answer: str, reward: float) -> None:
    result = grade(TokenF1, label, answer, settings)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == pytest.approx(reward)
    assert explanation(result).startswith(f"F1 {reward:.3f}")


@pytest.mark.parametrize("grader", [ExactMatch, Includes, TokenF1])
@pytest.mark.parametrize("label", [{"city": "Paris"}, True, [1, {"x": 2}], []])
def test_a_label_of_the_wrong_type_is_a_grader_validation_error(grader: Any, label: Any) -> None:
    result = grade(grader, label, "Paris")
    assert result.status is RolloutStatus.FAILURE
    assert result.error_category is ErrorCategory.VALIDATION_ERROR
    assert result.error_phase is Phase.GRADER
    assert result.error_message is not None
    assert f"{grader.__name__}: the label must be a string, a number or a list of them" in (
        result.error_message
    )
    assert result.sample is not None and result.sample.messages[-1]["content"] == "Paris"


@pytest.mark.parametrize("grader", [ExactMatch, Includes, TokenF1])
def test_no_assistant_answer_is_reward_zero_with_a_reason(grader: Any) -> None:
    result = grade(grader, "Paris", None)
    assert result.status is RolloutStatus.SUCCESS
    assert result.reward == 0.0
    assert "no assistant message with text" in explanation(result)


def test_the_answer_is_the_last_assistant_message_with_text() -> None:
    """Tool calls (content None) and text parts: the answer is the last text said."""
    messages = [
        {"role": "user", "content": "capital?"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Par"}, {"type": "text", "text": "is"}],
        },
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
        {"role": "tool", "tool_call_id": "1", "content": "Lyon"},
    ]
    request = ExecutionRequest("r", messages[:1], label="Paris")
    workflow = ExecutionResult("r", RolloutStatus.SUCCESS, sample=RolloutSample(messages))
    result = asyncio.run(run_grader_phase(request, workflow, ExactMatch, GraderConfig()))
    assert result.reward == 1.0
