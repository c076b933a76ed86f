"""Safe names: what a row id becomes where it names a directory or a container."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from osmo_run.sdk.names import MAX_SAFE_NAME, docker_part, rollout_name, safe_name


def test_an_id_that_is_already_a_safe_name_is_its_own_name() -> None:
    assert safe_name("calc-01") == "calc-01"
    assert safe_name("17") == "17"
    assert safe_name("a.b_c") == "a.b_c"


def test_other_ids_get_a_readable_slug_and_a_hash() -> None:
    name = safe_name("gsm8k/train/17")
    assert re.fullmatch(r"gsm8k-train-17-[0-9a-f]{16}", name), name
    assert re.fullmatch(r"x-[0-9a-f]{16}", safe_name("../../x"))
    assert re.fullmatch(r"id-[0-9a-f]{16}", safe_name(".."))
    assert re.fullmatch(r"upper-[0-9a-f]{16}", safe_name("Upper"))  # case-insensitive disks
    assert len(safe_name("x" * 300)) <= MAX_SAFE_NAME


def test_ids_differing_only_in_case_or_punctuation_get_different_names() -> None:
    ids = ["a/b", "a\\b", "a b", "A/B", "a-b", "a_b"]
    assert len({safe_name(i) for i in ids}) == len(ids)


@given(st.text(min_size=1))
def test_a_safe_name_stays_inside_its_parent(row_id: str) -> None:
    name = safe_name(row_id)
    assert re.fullmatch(r"[a-z0-9_][a-z0-9._-]*", name), name
    assert len(name) <= MAX_SAFE_NAME
    parent = Path("/runs/artifacts")
    assert (parent / name).resolve().parent == parent
    assert safe_name(name) == name  # a name is its own name


@given(st.text(min_size=1))
def test_docker_parts_fit_compose_project_names(row_id: str) -> None:
    part = docker_part(safe_name(row_id))
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,23}", part) or part == "row", part


def test_rollouts_of_a_row_run_several_times_are_named_by_sample() -> None:
    assert rollout_name("calc-01", None) == "calc-01"
    assert rollout_name("calc-01", 2) == "calc-01~2"
