"""JsonValid, JsonSchema (the real jsonschema) and JsonEquals: where the JSON is found,
what a schema failure says, and equality as data (``true`` is not ``1``)."""

from __future__ import annotations

from typing import Any

import pytest

from osmo_run import ErrorCategory, Phase, RolloutStatus
from osmo_run.graders import JsonEquals, JsonSchema, JsonValid
from osmo_run.graders.settings import SettingsError
from tests.graders.conftest import explanation, grade
from tests.llm.conftest import require_extra

VALID: list[tuple[dict[str, Any], str, float, str]] = [
    ({}, '{"a": 1}', 1.0, "the whole answer is JSON"),
    ({}, "[1, 2]", 1.0, "the whole answer is JSON"),
    ({}, '"just a string"', 1.0, "the whole answer is JSON"),
    ({}, 'Here you go:\n```json\n{"a": 1}\n```\nDone.', 1.0, "a fenced code block is JSON"),
    ({}, 'Sure! {"a": {"b": [1, 2]}} hope it helps', 1.0, "the object at character 6"),
    ({}, "I think {not json} but [1, 2] is", 1.0, "the array at character 23"),
    ({"strict": True}, 'Here: {"a": 1}', 0.0, "the answer is not JSON (Expecting value"),
    ({}, "{'a': 1}", 0.0, "no fenced block, object or array in it parses"),  # Python, not JSON
    ({}, '{"a": 1,}', 0.0, "the answer is not JSON"),
    ({}, "NaN", 1.0, "the whole answer is JSON"),  # read as Python reads it, unless strict
]


@pytest.mark.parametrize(("settings", "answer", "reward", "said"), VALID)
def test_json_valid(settings: dict[str, Any], answer: str, reward: float, said: str) -> None:
    result = grade(JsonValid, "unused", answer, settings)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward
    assert said in explanation(result)


EQUALS: list[tuple[dict[str, Any], Any, str, float, str | None]] = [
    ({}, '{"a": [1, 2], "b": true}', '{"b": true, "a": [1, 2.0]}', 1.0, None),  # key order, 2.0
    ({}, {"a": 1}, '{"a": 1}', 1.0, None),  # a label that is already data
    ({}, '{"a": 1}', '{"a": true}', 0.0, "$.a: true instead of 1"),  # true is not 1
    ({}, '{"a": true}', '{"a": 1}', 0.0, "$.a: 1 instead of true"),
    ({}, '{"a": [1, 2]}', '{"a": [2, 1]}', 0.0, "$.a[0]: 2 instead of 1"),
    ({"ignore_list_order": True}, '{"a": [1, 2]}', '{"a": [2, 1]}', 1.0, None),
    ({"ignore_list_order": True}, "[1, 1, 2]", "[1, 2, 2]", 0.0, "$: no item equal to $[1] = 1"),
    ({}, '{"a": 1}', '{"a": 1, "b": 2}', 0.0, "$: unexpected key 'b'"),
    ({"allow_extra_keys": True}, '{"a": 1}', '{"a": 1, "b": 2}', 1.0, None),
    ({}, '{"a": 1, "b": 2}', '{"a": 1}', 0.0, "$: missing key 'b'"),
    ({}, '{"a": {"b": "x"}}', '{"a": {"b": "y"}}', 0.0, '$.a.b: "y" instead of "x"'),
    ({}, '{"a": null}', '{"a": 0}', 0.0, "$.a: 0 instead of null"),
    ({}, '"\u00e9t\u00e9"', '"\\u00e9t\\u00e9"', 1.0, None),  # escapes are the same text
    ({}, "[1, 2]", "[1, 2, 3]", 0.0, "$: 3 items instead of 2"),
]


@pytest.mark.parametrize(("settings", "label", "answer", "reward", "difference"), EQUALS)
def test_json_equals(
    settings: dict[str, Any], label: Any, answer: str, reward: float, difference: str | None
) -> None:
    result = grade(JsonEquals, label, answer, settings)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward
    if difference is None:
        assert explanation(result) == "the whole answer equals the label as data"
    else:
        assert explanation(result) == f"the whole answer differs from the label at {difference}"


def test_json_equals_label_that_is_not_json_is_a_grader_validation_error() -> None:
    result = grade(JsonEquals, "abc", '"abc"')
    assert result.status is RolloutStatus.FAILURE
    assert (result.error_category, result.error_phase) == (
        ErrorCategory.VALIDATION_ERROR,
        Phase.GRADER,
    )
    assert result.error_message is not None
    assert "JsonEquals: the label 'abc' is a string that is not JSON" in result.error_message


SCHEMA = {
    "type": "object",
    "required": ["name", "age"],
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
}


@pytest.mark.parametrize(
    ("answer", "reward", "said"),
    [
        ('{"name": "Ada", "age": 36}', 1.0, "the whole answer matches the schema"),
        (
            '{"name": "Ada", "age": -1}',
            0.0,
            "fails the schema at $.age: -1 is less than the minimum of 0",
        ),
        ('{"name": "Ada"}', 0.0, "fails the schema at $: 'age' is a required property"),
        ('{"name": 7, "age": "x"}', 0.0, "fails the schema at $."),
        ("not json", 0.0, "the answer is not JSON"),
    ],
)
def test_json_schema(answer: str, reward: float, said: str) -> None:
    require_extra("jsonschema", "json")
    result = grade(JsonSchema, "unused", answer, {"schema": SCHEMA})
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward
    assert said in explanation(result)
    if reward == 0.0 and "not JSON" not in said:
        assert result.info["grader"]["schema_errors"]


def test_json_schema_from_the_label_of_each_row() -> None:
    require_extra("jsonschema", "json")
    as_text = '{"type": "array", "items": {"type": "number"}}'
    assert grade(JsonSchema, as_text, "[1, 2.5]").reward == 1.0
    assert grade(JsonSchema, {"type": "array"}, '{"a": 1}').reward == 0.0
    bad = grade(JsonSchema, {"type": "arrey"}, "[1]")
    assert bad.status is RolloutStatus.FAILURE
    assert bad.error_category is ErrorCategory.VALIDATION_ERROR
    assert bad.error_message is not None
    assert (
        "JsonSchema: the label (the row's schema) is not a valid JSON Schema" in bad.error_message
    )


def test_a_schema_that_is_not_one_stops_the_run() -> None:
    require_extra("jsonschema", "json")
    with pytest.raises(SettingsError, match=r"^settings\.schema: is not a valid JSON Schema: "):
        JsonSchema.validate_settings({"schema": {"type": "objekt"}})
    with pytest.raises(SettingsError, match=r"^settings\.schema: must be a mapping, got list"):
        JsonSchema.validate_settings({"schema": [1]})
