"""Includes with whole_words: a number inside a longer number (``4`` in ``4,000`` or
``4.5``) is not the label, and scripts written without spaces (Chinese, Japanese, Thai)
have no word boundaries to ask for."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osmo_run import RolloutStatus
from osmo_run.graders import Includes
from tests.graders.conftest import explanation, grade

WORDS: list[tuple[Any, str, float]] = [
    ("4", "The answer is 4,000.", 0.0),
    ("4", "The answer is 4.5", 0.0),
    ("5", "The answer is 4.5", 0.0),
    ("000", "The answer is 4,000.", 0.0),
    ("4", "The answer is 4.", 1.0),  # a full stop ends the sentence
    ("4", "It is 4, not 5.", 1.0),
    ("4.5", "The answer is 4.5 cm", 1.0),
    ("4.5", "The answer is 14.5", 0.0),
    ("4.5", "The answer is 4.55", 0.0),
    (4000, "The answer is 4000.", 1.0),
    ("北京", "首都是北京。", 1.0),
    ("北京", "The capital is 北京.", 1.0),
    ("東京", "日本の首都は東京です", 1.0),
    ("กรุงเทพ", "เมืองหลวงคือกรุงเทพ", 1.0),
    ("서울", "수도는 서울입니다", 1.0),
    ("Paris", "Parisian", 0.0),
    ("Paris", "北京Paris", 1.0),
]


@pytest.mark.parametrize(("label", "answer", "reward"), WORDS)
def test_includes_whole_words(label: Any, answer: str, reward: float) -> None:
    result = grade(Includes, label, answer)
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == reward, explanation(result)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from([",", "."]),
)
def test_a_number_is_never_found_inside_a_longer_number(a: int, b: int, sep: str) -> None:
    longer = f"{a}{sep}{b:03d}"
    assert grade(Includes, str(a), f"The total is {longer} apples").reward == 0.0
    assert grade(Includes, f"{b:03d}", f"The total is {longer} apples").reward == 0.0
    assert grade(Includes, longer, f"The total is {longer} apples").reward == 1.0


_HAN = st.text(st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_HAN, st.text(st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), max_size=6), _HAN)
def test_chinese_text_holds_the_label_wherever_it_stands(
    label: str, before: str, after: str
) -> None:
    assert grade(Includes, label, f"{before}{label}{after}。").reward == 1.0
