"""A results line that does not validate as a record, in any field, is listed among the lines
that are not records (with its line number and why) and left out of every page; no content
of a results file makes a page answer 500."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from osmo_run.view.catalog import Catalog
from osmo_run.view.server import Viewer, create_app
from tests.view import records

BROKEN_FIELDS = [
    ("reward", "high", "reward"),
    ("timings", {"total_sec": "slow", "queued_sec": 0}, "timings"),
    ("attempts", "many", "attempts"),
    ("sample", {"messages": "hi", "metrics": {}}, "sample"),
    ("usage", {"prompt_tokens": 1}, "usage"),
    ("row_index", 1.5, "row_index"),
    ("schema_version", 2, "schema_version"),
    ("error_phase", "lunch", "error_phase"),
    ("surprise", 1, "surprise"),
]


def pages(client: TestClient, key: str, count: int) -> Iterator[tuple[str, int]]:
    """Every page of a run: run page, fragment, state, filters, every row page."""
    for url in (
        f"/runs/{key}",
        f"/runs/{key}?fragment=1",
        f"/runs/{key}/state",
        f"/runs/{key}?sort=reward&order=desc",
        f"/runs/{key}?q=r0",
        f"/runs/{key}/find?row=r00001",
        "/",
        "/state",
    ):
        yield url, client.get(url).status_code
    for position in range(count + 1):
        url = f"/runs/{key}/rows/{position}"
        yield url, client.get(url).status_code


def open_client(results: Path, cache: Path) -> tuple[Viewer, TestClient]:
    viewer = Viewer(Catalog.open([results]), cache)
    app = create_app(viewer)
    return viewer, TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)


@pytest.mark.parametrize(("field", "value", "named"), BROKEN_FIELDS)
def test_a_line_with_a_field_of_the_wrong_kind_is_listed_as_not_a_record(
    tmp_path: Path, field: str, value: Any, named: str
) -> None:
    broken = {**records.record(1), field: value}
    results = records.write(
        tmp_path / "run" / "results.jsonl", [records.record(0), broken, records.record(2)]
    )
    viewer, client = open_client(results, tmp_path / "cache")
    with client:
        key = next(iter(viewer.views))
        run = client.get(f"/runs/{key}")
        assert run.status_code == 200
        assert "1 line of results.jsonl is not records" in run.text or (
            "line of results.jsonl is not" in run.text
        )
        listed = run.text.split('id="bad-lines"')[1].split("</ul>")[0]
        assert f"line 2: not an osmo-run record: {named}" in listed, listed
        assert run.text.count("<tr data-position") == 2
        assert client.get(f"/runs/{key}/state").json()["bad"] == 1
        for url, status in pages(client, key, 2):
            assert status < 500, url


_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_messages = st.lists(
    st.dictionaries(
        st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "name", "reasoning"]),
        _json_values,
        max_size=4,
    ),
    max_size=4,
)
_metrics = st.dictionaries(st.text(max_size=6), st.floats(allow_nan=True), max_size=3)
_backend = st.dictionaries(
    st.sampled_from(["trial_dir", "error_log", "trial_name", "x"]),
    st.one_of(st.sampled_from(["", ".", "..", "/", "/etc", "trials/x", "\x00"]), _json_values),
    max_size=3,
)
_FIELDS = [*sorted(records.record(0)), "safe_name", "grader_usage", "warnings"]


@st.composite
def hostile_records(draw: st.DrawFn) -> dict[str, Any]:
    """A record with some fields replaced by arbitrary JSON values, or a key dropped, at
    any depth one level down (timings, usage, sample)."""
    record = records.record(draw(st.integers(0, 3)))
    if draw(st.booleans()):  # a valid record whose free-form parts hold anything
        record["sample"] = {"messages": draw(_messages), "metrics": draw(_metrics)}
        record["info"] = draw(st.dictionaries(st.text(max_size=8), _json_values, max_size=3))
        record["backend"] = draw(_backend)
        if draw(st.booleans()):
            return record
    for _ in range(draw(st.integers(1, 4))):
        field = draw(st.sampled_from(_FIELDS))
        action = draw(st.sampled_from(["replace", "drop", "inner"]))
        if action == "drop":
            record.pop(field, None)
        elif action == "inner" and isinstance(record.get(field), dict):
            inner = dict(record[field])
            inner[draw(st.sampled_from([*inner, "x"]))] = draw(_json_values)
            record[field] = inner
        else:
            record[field] = draw(_json_values)
    return record


def _dump(value: dict[str, Any]) -> str:
    # NaN and Infinity as Python's json writes them: the results file may hold them
    return json.dumps(value, ensure_ascii=False, allow_nan=True)


@settings(
    max_examples=int(os.environ.get("OSMO_RUN_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lines=st.lists(hostile_records(), min_size=1, max_size=4))
def test_no_content_of_a_results_file_makes_a_page_answer_500(
    tmp_path_factory: pytest.TempPathFactory, lines: list[dict[str, Any]]
) -> None:
    base = tmp_path_factory.mktemp("hostile")
    results = base / "run" / "results.jsonl"
    results.parent.mkdir()
    results.write_text("".join(_dump(r) + "\n" for r in lines), encoding="utf-8")
    viewer, client = open_client(results, base / "cache")
    with client:
        key = next(iter(viewer.views))
        for url, status in pages(client, key, len(lines)):
            assert status < 500, (url, lines)
        state = client.get(f"/runs/{key}/state").json()
        assert state["count"] + state["bad"] == len(lines)  # each line is one or the other


def test_a_reward_of_nan_or_infinity_is_not_a_record(tmp_path: Path) -> None:
    lines = [_dump({**records.record(i), "reward": v}) for i, v in enumerate([math.nan, math.inf])]
    results = tmp_path / "run" / "results.jsonl"
    results.parent.mkdir()
    results.write_text("\n".join(lines) + "\n", encoding="utf-8")
    viewer, client = open_client(results, tmp_path / "cache")
    with client:
        key = next(iter(viewer.views))
        assert "line 1: not an osmo-run record: reward" in client.get(f"/runs/{key}").text
        state = client.get(f"/runs/{key}/state").json()
        assert (state["count"], state["bad"]) == (0, 2)


def test_comparing_runs_holding_lines_that_are_not_records_answers_no_500(
    tmp_path: Path,
) -> None:
    for name, reward in (("a", 1.0), ("b", "high")):
        broken = {**records.record(1), "reward": reward}
        records.write(tmp_path / name / "results.jsonl", [records.record(0), broken])
        manifest = {
            "run_id": name,
            "dataset_name": "d",
            "defining": {"dataset_sha256": "same", "rows": 2},
            "info": {},
        }
        (tmp_path / name / "results.manifest.json").write_text(json.dumps(manifest))
    _viewer, client = open_client(tmp_path, tmp_path / "cache")
    with client:
        page = client.get("/compare?a=a&b=b")
        assert page.status_code == 400, page.text
        assert "line 2 of" in page.text and "is not a record" in page.text
