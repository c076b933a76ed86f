"""Each row is parsed once: the rows a validation pass kept are the rows reading the file
again gives, bad ones and their names included, whatever the selection; past the bound
kept, or when nothing can be kept, the rest comes from the file."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from osmo_run.errors import DatasetError
from osmo_run.run.executing.plan import with_shuffle
from osmo_run.run.reading import dataset as dataset_module
from osmo_run.run.reading.dataset import Dataset, DatasetRow
from osmo_run.run.reading.selection import parse_rows

_IDS = st.one_of(st.integers(min_value=0, max_value=12), st.sampled_from(["1", "2", "line-3", "q"]))
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)
_LINES = st.one_of(
    st.builds(lambda i, v: json.dumps({"id": i, "prompt": "p", "extra": v}), _IDS, _VALUES),
    st.builds(
        lambda v: json.dumps({"messages": [{"role": "user", "content": "hi"}], "label": v}), _VALUES
    ),
    st.builds(
        lambda v: json.dumps({"user_prompt": "u", "system_prompt": "s", "metadata": v}), _VALUES
    ),
    _IDS.map(lambda i: json.dumps({"id": i, "prompt": 5})),  # bad, with a valid id
    st.just(json.dumps({"id": None, "prompt": "p"})),  # bad, named by its line
    st.just("{not json"),
    st.just('"\\ud800 lone"'),
    st.just(""),  # a blank line: no row
)


def _rows(dataset: Dataset, keep: bool) -> list[DatasetRow] | str:
    try:
        dataset.validate(stop_on_error=False, keep_rows=keep)
    except DatasetError as exc:
        return str(exc)
    return list(dataset.rows())


def _selections(path: Path) -> list[dict[str, Any]]:
    return [
        {},
        {"shard": (2, 3)},
        {"limit": 4},
        {"row_ranges": parse_rows("1-5")},
        {"agent_timeout_sec": 3.0, "grader_timeout_sec": 2.0},
    ]


def _same(kept: object, read_again: object) -> bool:
    """Equal rows, a NaN in a cell equal to a NaN (``==`` says ``nan != nan``)."""
    return repr(kept) == repr(read_again)


@settings(max_examples=150, deadline=None)
@example(['{"id": 0, "prompt": "p", "extra": NaN}'], 0)
@given(st.lists(_LINES, min_size=1, max_size=10), st.integers(min_value=0, max_value=200))
def test_kept_rows_are_the_rows_the_file_gives(lines: list[str], bound: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        path = Path(tmp) / "d.jsonl"
        path.write_text("\n".join(lines) + "\n")
        for selection in _selections(path):
            if "row_ranges" in selection and len([x for x in lines if x]) < 6:
                continue  # --rows past the end is refused either way
            read_again = _rows(Dataset(path, **selection), keep=False)
            assert _same(_rows(Dataset(path, **selection), keep=True), read_again)
            with patch.context() as small:  # a bound reached mid-file: the rest re-read
                small.setattr(dataset_module, "_KEPT_MAX_BYTES", bound)
                assert _same(_rows(Dataset(path, **selection), keep=True), read_again)
        drawn = with_shuffle(Dataset(path), 3, seed=4)
        assert _same(_rows(drawn, keep=True), _rows(with_shuffle(Dataset(path), 3, seed=4), False))


def test_rows_are_read_back_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"r{i}", "prompt": f"{i}"}) + "\n" for i in range(50))
    )
    dataset = Dataset(path)
    dataset.validate(stop_on_error=True, keep_rows=True)
    parsed: list[object] = []
    real = dataset_module.parse_row
    monkeypatch.setattr(
        dataset_module, "parse_row", lambda *args: parsed.append(args) or real(*args)
    )
    first, again = list(dataset.rows()), list(dataset.rows())
    assert [row.row_id for row in first] == [f"r{i}" for i in range(50)] and first == again
    assert first[7].request is not None and first[7].request.prompt[0]["content"] == "7"
    assert parsed == []  # each row was parsed once, by the validation pass


def test_a_temporary_file_that_cannot_be_written_leaves_the_rows_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}"}) + "\n" for i in range(20)))

    def full_disk(*args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dataset_module.tempfile, "TemporaryFile", full_disk)
    dataset = Dataset(path)
    assert dataset.validate(stop_on_error=True, keep_rows=True) == (20, [])
    assert [row.row_id for row in dataset.rows()] == [str(i) for i in range(1, 21)]


def test_the_hash_read_with_the_line_count_is_the_files(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"prompt": "a"}\n\n{"prompt": "b"}')
    dataset = Dataset(path)
    dataset.validate(stop_on_error=True, keep_rows=True)
    assert dataset.content_sha256() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert Dataset(path).content_sha256() == dataset.content_sha256()


def test_a_dataset_drawn_from_a_validated_one_reads_its_own_rows(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}"}) + "\n" for i in range(30)))
    every_row = Dataset(path)
    every_row.validate(stop_on_error=True, keep_rows=True)
    drawn = with_shuffle(every_row, 5, seed=2)
    assert len(list(drawn.rows())) == 5 and len(list(every_row.rows())) == 30


def test_rows_of_megabytes_are_kept_without_holding_many_at_once(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "d.jsonl"
    with open(path, "w") as handle:
        for i in range(24):
            handle.write(json.dumps({"id": i, "prompt": chr(97 + i) * (1 << 20)}) + "\n")
    dataset = Dataset(path)
    tracemalloc.start()
    try:
        dataset.validate(stop_on_error=True, keep_rows=True)
        kept_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        prompts = [row.request.prompt[0]["content"][0] for row in dataset.rows() if row.request]
        read_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert prompts == [chr(97 + i) for i in range(24)]
    assert kept_peak < 12 << 20 and read_peak < 12 << 20, (kept_peak, read_peak)
