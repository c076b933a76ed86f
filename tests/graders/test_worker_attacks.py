"""Hostile answers and schemas against the graders that compute in worker processes: what
crosses to a worker comes back unchanged (lone surrogates, control characters, NaN, deep
nesting), so every grade equals the in-process one, and a schema whose ``pattern``
backtracks ends at the grader deadline like a regex."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osmo_run import ErrorCategory, Phase, RolloutStatus
from osmo_run.graders import JsonSchema, RegexMatch
from osmo_run.graders.json_data import schema_failures
from osmo_run.graders.text import RegexMatchSettings, regex_search
from osmo_run.graders.workers import GRADER_WORKERS
from osmo_run.testing import run_grader
from tests.graders.conftest import grade

ANY_CHARACTER = st.characters(codec=None, exclude_categories=())
"""Every code point, lone surrogates and control characters included."""

PATTERNS = ["(.)$", r"(\w+)\W*$", r"(?s)^(.*)$", r"([\ud800-\udfff])", r"(\x00|\x1b)"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(ANY_CHARACTER, max_size=200),
    pattern=st.sampled_from(PATTERNS),
    occurrence=st.sampled_from(["first", "last"]),
)
def test_a_regex_search_in_a_worker_finds_what_every_match_listed_here_says(
    text: str, pattern: str, occurrence: Literal["first", "last"]
) -> None:
    search = RegexMatchSettings(pattern=pattern, compare="found", occurrence=occurrence)
    there = asyncio.run(GRADER_WORKERS.run(regex_search, search, text))
    matches = list(search.compiled().finditer(text))
    if not matches:
        assert there is None
    else:
        match = matches[0] if occurrence == "first" else matches[-1]
        assert there == (match.group(0), match.group(1) or "")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(ANY_CHARACTER, max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(ANY_CHARACTER, max_size=5), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_schema_failures_in_a_worker_equal_the_ones_here(data: Any) -> None:
    schema = {"type": "object", "required": ["a"], "additionalProperties": {"type": "number"}}
    there = asyncio.run(GRADER_WORKERS.run(schema_failures, schema, data))
    here = schema_failures(schema, data)
    assert (there is None) == (here is None)
    if there is not None and here is not None:
        # jsonschema lists the errors of unknown keys in set order, which follows string
        # hashes, randomised per process: the same errors, maybe in another order
        assert sorted(there[1]) == sorted(here[1])


def test_nan_infinity_and_deep_nesting_grade_as_json_schema_says() -> None:
    pytest.importorskip("jsonschema")
    numbers = grade(
        JsonSchema,
        None,
        "[NaN, Infinity, -Infinity]",
        {"schema": {"type": "array", "items": {"type": "number"}}},
    )
    assert numbers.reward == 1.0, numbers.error_message
    deep = "[" * 500 + "]" * 500
    nested = grade(JsonSchema, None, deep, {"schema": {"type": "array", "maxItems": 0}})
    assert nested.reward == 0.0, nested.error_message
    assert math.isnan(json.loads("NaN"))


def test_a_schema_pattern_that_backtracks_is_a_grader_timeout() -> None:
    pytest.importorskip("jsonschema")
    schema = {"type": "string", "pattern": "^(\\w+\\s?)*$"}
    answer = json.dumps("a" * 40 + "!")
    started = time.monotonic()
    result = asyncio.run(
        run_grader(
            JsonSchema,
            [{"role": "assistant", "content": answer}],
            None,
            settings={"schema": schema, "strict": True},
            timeout_sec=3,
        )
    )
    assert time.monotonic() - started < 3 + 20
    assert result.status is RolloutStatus.FAILURE
    assert (result.error_category, result.error_phase) == (ErrorCategory.TIMEOUT, Phase.GRADER)
    again = grade(JsonSchema, None, json.dumps("a few words"), {"schema": schema})
    assert again.reward == 1.0, again.error_message  # the next row gets a new worker


def test_a_regex_match_on_a_huge_answer_grades_right() -> None:
    answer = "x" * 5_000_000 + " ANSWER: C"
    result = grade(RegexMatch, "C", answer, {"pattern": r"ANSWER:\s*([A-D])"})
    assert result.reward == 1.0, result.error_message
