"""JSON graders on answers that defeated them: a permutation that greedy pairing of list
items refused, ``NaN`` and ``Infinity`` under ``strict``, and answers nested or long
enough to break Python's parser (reward 0, never an error row)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osmo_run import RolloutStatus
from osmo_run.graders import JsonEquals, JsonSchema, JsonValid
from tests.graders.conftest import explanation, grade

UNORDERED = {"ignore_list_order": True, "allow_extra_keys": True}


@pytest.mark.parametrize(
    ("label", "answer", "reward"),
    [
        # greedy pairing gave the first label item the answer's first item, leaving nothing
        # for the second: a valid pairing exists
        ([{"a": 1}, {"a": 1, "b": 2}], [{"a": 1, "b": 2}, {"a": 1}], 1.0),
        ([{"a": 1}, {"a": 1, "b": 2}], [{"a": 1, "b": 2, "c": 3}, {"a": 1, "c": 3}], 1.0),
        ([{"a": 1}, {"b": 2}], [{"a": 1, "b": 2}, {"c": 3}], 0.0),
        ([[{"k": 1}, {"k": 1, "v": 2}]], [[{"k": 1, "v": 2}, {"k": 1}]], 1.0),  # nested
    ],
)
def test_json_equals_pairs_list_items_as_a_matching(label: Any, answer: Any, reward: float) -> None:
    result = grade(JsonEquals, label, json.dumps(answer), UNORDERED)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward, explanation(result)


def test_an_unpaired_item_is_named() -> None:
    result = grade(JsonEquals, [{"a": 1}, {"b": 2}], '[{"a": 1, "b": 2}, {"c": 3}]', UNORDERED)
    assert explanation(result) == (
        'the whole answer differs from the label at $: no item equal to $[1] = {"b": 2} '
        "left once the others are paired"
    )


_JSON_ITEMS = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["x", "y"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_JSON_ITEMS, max_size=6), st.randoms(use_true_random=False))
def test_any_permutation_of_a_list_matches(items: list[Any], random: Any) -> None:
    shuffled = list(items)
    random.shuffle(shuffled)
    for extra in (False, True):
        options = {"ignore_list_order": True, "allow_extra_keys": extra}
        result = grade(JsonEquals, items, json.dumps(shuffled), options)
        assert result.reward == 1.0, explanation(result)


@pytest.mark.parametrize("answer", ["NaN", "Infinity", "-Infinity", '{"a": NaN}', "[Infinity]"])
def test_strict_json_refuses_nan_and_infinity(answer: str) -> None:
    for grader in (JsonValid, JsonEquals):
        result = grade(grader, '{"a": 1}', answer, {"strict": True})
        assert result.status is RolloutStatus.SUCCESS, result.error_message
        assert result.reward == 0.0
        assert "is not JSON" in explanation(result)
        assert "NaN and Infinity are not JSON" in explanation(result)


DEEP = "[" * 100_000 + "]" * 100_000
LONG_NUMBER = "9" * 5000


@pytest.mark.parametrize(
    ("settings", "answer", "reward", "said"),
    [
        ({}, DEEP, 0.0, "nested too deeply"),
        ({"strict": True}, DEEP, 0.0, "nested too deeply"),
        ({}, f"Here: {DEEP}", 0.0, "no fenced block, object or array in it parses"),
        ({}, LONG_NUMBER, 1.0, "the whole answer is JSON"),
        ({}, f'{{"n": {LONG_NUMBER}}}', 1.0, "the whole answer is JSON"),
    ],
)
def test_json_valid_on_answers_that_break_the_parser(
    settings: dict[str, Any], answer: str, reward: float, said: str
) -> None:
    result = grade(JsonValid, None, answer, settings)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward
    assert said in explanation(result)


@pytest.mark.parametrize(
    ("label", "answer", "reward"),
    [
        ({"n": 1}, f'{{"n": {LONG_NUMBER}}}', 0.0),
        (f'{{"n": {LONG_NUMBER}}}', f'{{"n": {LONG_NUMBER}}}', 1.0),
        (f'{{"n": {LONG_NUMBER}}}', f'{{"n": {LONG_NUMBER[:-1]}8}}', 0.0),
        ([1], DEEP, 0.0),
        ([[[1]]], "[" * 900 + "]" * 900, 0.0),
    ],
)
def test_json_equals_on_answers_that_break_the_parser(
    label: Any, answer: str, reward: float
) -> None:
    for options in ({}, UNORDERED):
        result = grade(JsonEquals, label, answer, options)
        assert result.status is RolloutStatus.SUCCESS, result.error_message
        assert result.reward == reward, explanation(result)


def test_json_schema_on_a_deep_answer_is_reward_0() -> None:
    pytest.importorskip("jsonschema")
    result = grade(JsonSchema, None, DEEP, {"schema": {"type": "array"}})
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == 0.0


def test_a_label_nested_too_deeply_to_compare_is_a_validation_error() -> None:
    deep = "[" * 150 + "]" * 150
    result = grade(JsonEquals, deep, deep)
    assert result.status is RolloutStatus.FAILURE
    assert result.error_message is not None
    assert "JsonEquals: the label nests more than 100 levels deep" in result.error_message


def test_brackets_before_an_unclosed_megabyte_are_not_each_parsed_to_its_end() -> None:
    # each of 200 tries read the whole megabyte: minutes, past the grader's deadline
    answer = "x " + "[" * 200 + "1," * 500_000
    result = grade(JsonValid, None, answer)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == 0.0


@pytest.mark.parametrize("extra", [False, True])
def test_unordered_items_compare_as_json_data(extra: bool) -> None:
    options = {"ignore_list_order": True, "allow_extra_keys": extra}
    assert grade(JsonEquals, [1, True, None], "[true, null, 1.0]", options).reward == 1.0
    assert grade(JsonEquals, [1, True], "[true, true]", options).reward == 0.0
    assert grade(JsonEquals, [1, 1], "[1, true]", options).reward == 0.0
