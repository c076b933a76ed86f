"""Reading JSONL datasets: both row styles, ids, metadata, bad lines, and odd files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osmo_run.errors import DatasetError
from osmo_run.run.reading.dataset import Dataset, DatasetRow
from tests.conftest import Row, WriteJsonl, jsonl_bytes


def _rows(path: Path, **kwargs: Any) -> list[DatasetRow]:
    return list(Dataset(path, **kwargs).rows())


def _requests(path: Path, **kwargs: Any) -> list[Any]:
    rows = _rows(path, **kwargs)
    assert all(row.error is None for row in rows), [row.error for row in rows]
    return [row.request for row in rows]


def test_osmosis_columns_become_prompt_label_and_metadata(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl(
        [
            {
                "id": "q1",
                "system_prompt": "Be brief.",
                "user_prompt": "2+2?",
                "ground_truth": "4",
                "metadata": {"topic": "math"},
            },
            {"user_prompt": "3+3?", "ground_truth": 6, "metadata": '{"topic": "more math"}'},
        ]
    )
    first, second = _requests(path, agent_timeout_sec=7.0, grader_timeout_sec=3.0)
    assert first.id == "q1"
    assert first.prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
    ]
    assert first.label == "4"
    assert first.metadata == {"topic": "math"}
    assert (first.agent_timeout_sec, first.grader_timeout_sec) == (7.0, 3.0)
    assert second.prompt == [{"role": "user", "content": "3+3?"}]
    assert second.label == 6
    assert second.metadata == {"topic": "more math"}


def test_chat_rows_take_messages_or_a_prompt_list_or_string(write_jsonl: WriteJsonl) -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    path = write_jsonl(
        [
            {"messages": messages, "label": "a"},
            {"prompt": messages, "label": ["b"]},
            {"prompt": "just text", "label": {"c": 1}},
        ]
    )
    first, second, third = _requests(path)
    assert first.prompt == messages and first.label == "a"
    assert second.prompt == messages and second.label == ["b"]
    assert third.prompt == [{"role": "user", "content": "just text"}]
    assert third.label == {"c": 1}


def test_rows_without_id_are_named_by_line_number(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([{"prompt": "a"}, "", "   ", {"id": 17, "prompt": "b"}, {"prompt": "c"}])
    rows = _rows(path)
    assert [(row.index, row.line, row.row_id) for row in rows] == [
        (0, 1, "1"),
        (1, 4, "17"),
        (2, 5, "5"),
    ]


def test_extra_columns_land_in_metadata(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl(
        [{"prompt": "a", "label": "x", "difficulty": 3, "topic": "m", "metadata": {"topic": "m"}}]
    )
    (request,) = _requests(path)
    assert request.metadata == {"topic": "m", "difficulty": 3}  # the same value twice: fine


def test_empty_label_means_no_label(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([{"prompt": "a", "label": ""}, {"prompt": "b"}, {"prompt": "c", "label": 0}])
    assert [r.label for r in _requests(path)] == [None, None, 0]


def test_limit_keeps_the_first_rows(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([{"prompt": str(i)} for i in range(10)])
    assert [r.id for r in _requests(path, limit=3)] == ["1", "2", "3"]
    assert Dataset(path, limit=3).validate(stop_on_error=True) == (3, [])


def test_a_row_with_metadata_and_no_prompt_gets_an_empty_prompt(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl(
        [
            {"id": "m", "metadata": {"question": "2+2"}, "label": "4"},
            {"prompt": "", "topic": "math"},  # an empty prompt column, an extra column
            {"messages": [], "metadata": '{"n": 1}'},
        ]
    )
    first, second, third = _requests(path)
    assert (first.prompt, first.metadata, first.label) == ([], {"question": "2+2"}, "4")
    assert (second.prompt, second.metadata) == ([], {"topic": "math"})
    assert (third.prompt, third.metadata) == ([], {"n": 1})


def test_byte_order_mark_is_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + jsonl_bytes([{"id": "a", "prompt": "x"}]))
    assert [r.id for r in _requests(path)] == ["a"]


BAD_LINES: list[tuple[Row, str]] = [
    ('{"prompt": "a"', "not valid JSON (Expecting ',' delimiter, column 15)"),
    ("[1, 2]", "a row must be a JSON object, got list"),
    ('"text"', "a row must be a JSON object, got str"),
    ({"label": "x"}, "row has no prompt and no metadata: give 'messages', 'prompt' or"),
    ({"user_prompt": 3}, "'user_prompt' must be a string, got int"),
    ({"user_prompt": "a", "system_prompt": ["s"]}, "'system_prompt' must be a string, got list"),
    ({"messages": []}, "'messages' is empty and no metadata: give 'messages', 'prompt' or"),
    # one rule for every empty prompt, list, string or null
    ({"prompt": []}, "'prompt' is empty and no metadata"),
    ({"prompt": ""}, "'prompt' is empty and no metadata"),
    ({"prompt": None, "metadata": {}}, "'prompt' is empty and no metadata"),
    ({"user_prompt": ""}, "'user_prompt' is empty and no metadata"),
    ({"system_prompt": "s", "metadata": {"a": 1}}, "'system_prompt' without a 'user_prompt'"),
    ({"prompt": 3}, "'prompt' must be a list of messages or a string"),
    # two columns saying different things: refused, never one chosen silently
    (
        {"prompt": "a", "label": "4", "ground_truth": "5"},
        "'label' and 'ground_truth' differ ('4' and '5'): give one of them",
    ),
    (
        {"prompt": "a", "label": "", "ground_truth": "5"},
        "'label' and 'ground_truth' differ ('' and '5'): give one of them",
    ),
    (
        {"prompt": "a", "user_prompt": "b"},
        "'prompt' and 'user_prompt' both give the prompt: keep one of them",
    ),
    (
        {"messages": [{"role": "user", "content": "a"}], "prompt": "a"},
        "'messages' and 'prompt' both give the prompt: keep one of them",
    ),
    (
        {"prompt": "a", "system_prompt": "s"},
        "'system_prompt' goes with 'user_prompt'; with 'prompt', put the system message in it",
    ),
    (
        {"prompt": "a", "topic": "col", "metadata": {"topic": "m"}},
        "'topic' is a column and a 'metadata' key with different values ('col' and 'm'): "
        "keep one of them",
    ),
    ({"prompt": ["hi"]}, "'prompt[0]' must be an object like"),
    ({"prompt": [{"content": "hi"}]}, "'prompt[0]' has no string 'role'"),
    ({"prompt": "a", "metadata": [1]}, "'metadata' must be an object, got list"),
    ({"prompt": "a", "metadata": "{oops"}, "'metadata' is a string but not a JSON object"),
    ({"id": "", "prompt": "x"}, "'id' is empty: give every row a non-empty id"),
    ({"id": None, "prompt": "x"}, "'id' must be a non-empty string or an integer, got null"),
    ({"id": 1.5, "prompt": "x"}, "'id' must be a non-empty string or an integer, got float"),
    ({"id": True, "prompt": "x"}, "'id' must be a non-empty string or an integer, got bool"),
    (b'{"prompt": "caf\xe9"}', "not valid UTF-8 (byte 16); re-encode the file as UTF-8"),
    ("[" * 100_000, "JSON nested too deeply"),
]


@pytest.mark.parametrize(("line", "reason"), BAD_LINES)
def test_bad_line_stops_validation_naming_file_and_line(
    write_jsonl: WriteJsonl, line: Row, reason: str
) -> None:
    path = write_jsonl([{"prompt": "fine"}, "", line, {"prompt": "never read"}])
    with pytest.raises(DatasetError) as info:
        Dataset(path).validate(stop_on_error=True)
    first_line = str(info.value).splitlines()[0]
    assert first_line.startswith(f"{path}:3: ")
    assert reason in first_line
    assert "nothing was run" in str(info.value)


@pytest.mark.parametrize(("line", "reason"), BAD_LINES)
def test_bad_line_becomes_a_row_error_when_recording(
    write_jsonl: WriteJsonl, line: Row, reason: str
) -> None:
    path = write_jsonl([{"prompt": "fine"}, line, {"prompt": "also fine"}])
    rows = _rows(path)
    assert [row.line for row in rows] == [1, 2, 3]
    bad = rows[1]
    assert bad.request is None
    assert bad.error is not None and bad.error.startswith(f"{path}:2: ")
    assert reason in bad.error
    assert rows[2].request is not None
    count, problems = Dataset(path).validate(stop_on_error=False)
    assert count == 3
    assert problems == [bad.error]


def test_empty_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(DatasetError, match=r"empty\.jsonl: the dataset has no rows"):
        Dataset(path).validate(stop_on_error=True)


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"is a directory; pass a \.jsonl file"):
        Dataset(tmp_path).validate(stop_on_error=True)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"missing\.jsonl: dataset file not found"):
        Dataset(tmp_path / "missing.jsonl").validate(stop_on_error=True)


@pytest.mark.parametrize(
    ("rows", "line", "first"),
    [
        (
            [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "x"}, {"id": "a", "prompt": "y"}],
            3,
            1,
        ),
        ([{"id": 1, "prompt": "x"}, {"id": "1", "prompt": "y"}], 2, 1),
        ([{"prompt": "x"}, {"id": 2, "prompt": "y"}, {"id": 2, "prompt": "z"}], 3, 2),
        ([{"id": 2, "prompt": "x"}, {"prompt": "y"}], 2, 1),
        ([{"prompt": "x"}, {"prompt": "y"}, {"id": "1", "prompt": "z"}], 3, 1),
    ],
    ids=[
        "strings",
        "int-and-string",
        "id-equal-to-its-line",
        "id-equal-to-a-later-line",
        "id-equal-to-an-earlier-line",
    ],
)
def test_duplicate_ids_are_refused(
    write_jsonl: WriteJsonl, rows: list[Row], line: int, first: int
) -> None:
    path = write_jsonl(rows)
    with pytest.raises(DatasetError) as info:
        Dataset(path).validate(stop_on_error=False)
    assert str(info.value).startswith(f"{path}:{line}: duplicate id ")
    assert f"(first at line {first})" in str(info.value)


def test_unique_ids_and_line_numbers_pass_validation(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([{"id": 1, "prompt": "x"}, {"prompt": "y"}, {"id": "c", "prompt": "z"}])
    assert Dataset(path).validate(stop_on_error=True) == (3, [])


# Property-based: whatever text a row holds reaches the request unchanged; whatever bytes a
# line holds, reading it either works or fails with a dataset error.

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    prompt=st.text(min_size=1),
    system=st.text(),
    label=st.text(),
    metadata=st.dictionaries(st.text(), json_values, max_size=4),
    chat=st.booleans(),
)
def test_row_text_round_trips_into_the_request(
    tmp_path: Path, prompt: str, system: str, label: str, metadata: dict[str, Any], chat: bool
) -> None:
    if chat:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        row: dict[str, Any] = {"messages": messages, "label": label, "metadata": metadata}
    else:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        row = {"system_prompt": system, "user_prompt": prompt, "ground_truth": label}
        row["metadata"] = json.dumps(metadata)  # the osmosis style's JSON-string metadata
    path = tmp_path / "prop.jsonl"
    path.write_bytes(jsonl_bytes([row]))
    (dataset_row,) = _rows(path)
    request = dataset_row.request
    assert request is not None, dataset_row.error
    assert request.prompt == messages
    assert request.label == (label or None)
    assert request.metadata == metadata


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(st.binary(max_size=40), min_size=1, max_size=4))
def test_arbitrary_line_bytes_are_parsed_or_rejected_as_dataset_errors(
    tmp_path: Path, lines: list[bytes]
) -> None:
    path = tmp_path / "bytes.jsonl"
    path.write_bytes(b"\n".join(lines))
    try:
        rows = _rows(path)
    except DatasetError as exc:
        assert str(exc).startswith(f"{path}:")
        return
    for row in rows:
        assert (row.request is None) != (row.error is None)
        if row.error is not None:
            assert row.error.startswith(f"{path}:{row.line}: ")
    try:
        Dataset(path).validate(stop_on_error=False)
    except DatasetError as exc:
        assert str(exc).startswith(f"{path}")


ODD_IDS = [
    "gsm8k/train/17",
    "org/repo#123",
    "a/b\\c d",
    "../../x",
    "..",
    ".",
    "x" * 300,
    "nul\x00here",
    "line\nbreak",
    "Upper",
    "[red]markup[/red]",
    "  ",
    "ünïcödé/分",
]


def test_ids_of_every_shape_are_kept_exactly(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([{"id": row_id, "prompt": "x"} for row_id in ODD_IDS])
    assert Dataset(path).validate(stop_on_error=True) == (len(ODD_IDS), [])
    assert [request.id for request in _requests(path)] == ODD_IDS


def test_two_ids_of_one_safe_name_are_refused_naming_both(write_jsonl: WriteJsonl) -> None:
    from osmo_run.sdk.names import safe_name

    clash = safe_name("a/b")  # an id spelt like another id's safe name
    path = write_jsonl(
        [{"id": "a/b", "prompt": "x"}, {"prompt": "y"}, {"id": clash, "prompt": "z"}]
    )
    with pytest.raises(DatasetError) as info:
        Dataset(path).validate(stop_on_error=True)
    assert str(info.value) == (
        f"{path}:3: id {clash!r} and id 'a/b' (line 1) have the same file name {clash!r}; "
        "rename one of them"
    )
