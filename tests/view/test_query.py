"""The rows table's query: each filter, free text, sorting and paging, and the one-line
error for a bad field."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from osmo_run.view.index import RowIndex
from osmo_run.view.query import QueryCache, QueryError, RowQuery, run_query
from tests.view import records


@pytest.fixture
def index(tmp_path: Path) -> RowIndex:
    rows = records.mixed(60)
    rows.append(records.record(60, text='She said "Ünïcode <b>bold</b>" twice'))
    built = RowIndex(records.write(tmp_path / "results.jsonl", rows))
    built.refresh()
    return built


def ids(index: RowIndex, **params: str) -> list[str]:
    page = run_query(index, RowQuery.parse({"per_page": "200", **params}), QueryCache())
    return [index.read(p)["row_id"] for p in page.positions]


def test_status_category_phase_and_reward_filters(index: RowIndex) -> None:
    timeouts = ids(index, category="timeout")
    assert timeouts == [f"r{i:05d}" for i in range(9, 60, 10)]
    assert ids(index, status="failure", phase="grader") == ["r00014", "r00044"]
    assert ids(index, category="agent_error", phase="workflow") == []
    assert len(ids(index, category="none")) == 61 - 6 - 2
    assert ids(index, category="no_such_category") == []
    high = ids(index, reward_min="0.75")
    assert high and all(index.read(int(i[1:]))["reward"] >= 0.75 for i in high)
    both = ids(index, reward_min="0.25", reward_max="0.25")
    assert both == [r for r in ids(index) if index.read(int(r[1:]))["reward"] == 0.25]


def test_free_text_searches_ids_messages_and_errors_not_keys(index: RowIndex) -> None:
    assert ids(index, q="r00042") == ["r00042"]
    assert ids(index, q="ANSWER 17") == ["r00017"]  # case does not matter
    assert ids(index, q="went wrong in row 29") == ["r00029"]  # an error message
    assert ids(index, q='"ünïcode <b>bold</b>"') == ["r00060"]  # quotes, non-ASCII, markup
    assert ids(index, q="row_id") == []  # a key, in every line, but not a value
    assert ids(index, q="question 5", status="success") == ["r00005"] + [
        f"r000{n}" for n in range(50, 60) if n % 10 != 9 and n % 15 != 14
    ]


def test_sorting_and_paging(index: RowIndex) -> None:
    by_duration = ids(index, sort="seconds", order="desc")
    assert by_duration[0] == "r00059"  # the slowest timeout
    rewards = [index.read(int(r[1:]))["reward"] for r in ids(index, sort="reward", order="desc")]
    known = [r for r in rewards if r is not None]
    assert known == sorted(known, reverse=True)
    assert rewards[len(known) :] == [None] * (len(rewards) - len(known))  # no reward last
    newest_first = ids(index, order="desc")
    assert newest_first[0] == "r00060" and newest_first[-1] == "r00000"

    first = run_query(index, RowQuery.parse({"per_page": "25"}))
    third = run_query(index, RowQuery.parse({"per_page": "25", "page": "3"}))
    assert (first.total, first.pages, len(third.positions)) == (61, 3, 11)
    assert third.positions == list(range(50, 61))
    filtered = run_query(
        index, RowQuery.parse({"status": "success", "per_page": "25", "page": "2"})
    )
    assert filtered.total == 53 and filtered.pages == 3 and len(filtered.positions) == 25


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"status": "won"}, "status: 'won' is not one of success, failure, cancelled"),
        ({"reward_min": "high"}, "reward_min: 'high' is not a number"),
        ({"reward_max": "nan"}, "reward_max: 'nan' is not a finite number"),
        ({"page": "0"}, "page: '0' is not a page number"),
        ({"per_page": "7"}, "per_page: '7' is not one of (25, 50, 100, 200)"),
        ({"sort": "vibes"}, "sort: 'vibes' is not one of line, row, reward"),
    ],
)
def test_a_bad_field_is_named(params: dict[str, str], message: str) -> None:
    with pytest.raises(QueryError) as caught:
        RowQuery.parse(params)
    assert str(caught.value).startswith(message)


def test_links_keep_the_query_and_flip_the_sort() -> None:
    query = RowQuery.parse({"category": "timeout", "sort": "reward", "order": "desc"})
    assert query.url("/runs/k", page=2) == (
        "/runs/k?category=timeout&sort=reward&order=desc&page=2"
    )
    assert query.sort_url("/runs/k", "reward") == "/runs/k?category=timeout&sort=reward"
    assert math.isclose(RowQuery.parse({"reward_min": "0.5"}).reward_min or 0, 0.5)


def test_the_passing_filter_lists_successes_below_the_pass_threshold(index: RowIndex) -> None:
    """``passing=no`` is a wrong answer: a success rewarded below the threshold (never a
    failure, which has its own filter, nor a success without a reward)."""

    def reward_and_status(row_id: str) -> tuple[float | None, str]:
        record = index.read(int(row_id[1:]))
        return record.get("reward"), record["status"]

    wrong = ids(index, passing="no")
    assert wrong
    for row_id in wrong:
        reward, status = reward_and_status(row_id)
        assert status == "success" and reward is not None and reward < 1.0
    passed = ids(index, passing="yes")
    assert passed and all(reward_and_status(r) == (1.0, "success") for r in passed)
    strict = run_query(index, RowQuery.parse({"passing": "no", "per_page": "200"}), None, 0.5)
    assert len(strict.positions) < len(wrong)  # a lower threshold: fewer wrong answers
    with pytest.raises(QueryError, match="passing: 'maybe' is not one of no, yes"):
        RowQuery.parse({"passing": "maybe"})


def test_text_inside_tool_call_arguments_is_found_as_written_not_json_escaped(
    tmp_path: Path,
) -> None:
    """Tool-call arguments are a JSON text inside the record (``json.dumps`` escapes
    non-ASCII as ``\\u00fc``): a search for what the model wrote must find it."""
    import json

    row = records.record(0)
    arguments = json.dumps({"query": 'ünï ✓ "quoted"'})  # ASCII-escaped, as most SDKs do
    assert "\\u00fc" in arguments
    row["sample"]["messages"].append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "grep_files", "arguments": arguments},
                }
            ],
        }
    )
    built = RowIndex(records.write(tmp_path / "results.jsonl", [row, records.record(1)]))
    built.refresh()
    assert ids(built, q="ünï ✓") == ["r00000"]
    assert ids(built, q="ÜNÏ") == ["r00000"]
    assert ids(built, q='ï ✓ "quoted"') == ["r00000"]
    assert ids(built, q="\\u00fc") == []  # the escape is not what anyone wrote


def test_a_page_past_the_last_is_the_last_filtered_or_not(index: RowIndex) -> None:
    whole = run_query(index, RowQuery.parse({"page": "2001"}), QueryCache())
    assert (whole.page, whole.pages) == (2, 2) and len(whole.positions) == 11
    failed = run_query(index, RowQuery.parse({"status": "failure", "page": "9"}), QueryCache())
    assert (failed.page, failed.pages) == (1, 1) and failed.positions


def test_neighbors_follow_the_filtered_sorted_list(index: RowIndex) -> None:
    from osmo_run.view.query import neighbors

    query = RowQuery.parse({"status": "failure", "sort": "reward", "per_page": "25"})
    listed = run_query(index, query, QueryCache()).positions
    near = neighbors(index, query, listed[1], QueryCache())
    assert (near.previous, near.next, near.place, near.total) == (
        listed[0],
        listed[2],
        2,
        len(listed),
    )
    assert neighbors(index, query, 0, QueryCache()).place is None  # r00000 is a success
    plain = neighbors(index, RowQuery.parse({"order": "desc"}), 10)
    assert (plain.previous, plain.next, plain.place) == (11, 9, 51)
