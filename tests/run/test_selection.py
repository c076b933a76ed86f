"""Row selection: ``--rows`` ranges, ``--shuffle --seed`` with ``--limit``, and shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from osmo_run.errors import DatasetError
from osmo_run.run.executing.plan import with_shuffle
from osmo_run.run.reading.dataset import Dataset
from osmo_run.run.reading.selection import parse_rows, shuffled_pick
from tests.conftest import WriteJsonl


def test_rows_parse_into_merged_inclusive_ranges() -> None:
    ranges = parse_rows("10-20, 3,7,8,15-25")
    assert ranges.ranges == ((3, 3), (7, 8), (10, 25))
    assert str(ranges) == "3,7-8,10-25"
    assert [i for i in range(30) if i in ranges] == [3, 7, 8, *range(10, 26)]
    assert len(ranges) == 19 and ranges.last == 25


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "is not a row index"),
        ("a", "is not a row index"),
        ("3,,4", "is not a row index"),
        ("5-3", "a range goes from a lower index to a higher one"),
        ("-1", "is not a row index"),
    ],
)
def test_bad_rows_are_refused(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_rows(text)


def _indexes(dataset: Dataset) -> list[int]:
    return [row.index for row in dataset.rows()]


def test_rows_keep_the_listed_indexes_and_shards_split_them(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([{"prompt": f"{i}"} for i in range(30)])
    ranges = parse_rows("3,7,10-20")
    assert _indexes(Dataset(path, row_ranges=ranges)) == [3, 7, *range(10, 21)]
    assert _indexes(Dataset(path, row_ranges=ranges, limit=3)) == [3, 7, 10]
    first = _indexes(Dataset(path, row_ranges=ranges, shard=(1, 2)))
    second = _indexes(Dataset(path, row_ranges=ranges, shard=(2, 2)))
    assert sorted(first + second) == [3, 7, *range(10, 21)]
    assert abs(len(first) - len(second)) <= 1
    assert Dataset(path, row_ranges=ranges).validate(stop_on_error=True) == (13, [])


def test_rows_past_the_end_of_the_file_are_refused(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([{"prompt": f"{i}"} for i in range(5)])
    with pytest.raises(DatasetError) as info:
        Dataset(path, row_ranges=parse_rows("2,4-9")).validate(stop_on_error=True)
    assert str(info.value) == (
        f"{path}: --rows 2,4-9 names row 9, but the file has 5 rows (indexes 0-4; rows are "
        "counted from 0)"
    )


def test_shuffle_draws_a_reproducible_subset_that_depends_on_the_seed(
    write_jsonl: WriteJsonl,
) -> None:
    path = write_jsonl([{"prompt": f"{i}"} for i in range(100)])

    def drawn(seed: int, **kwargs: object) -> list[int]:
        return _indexes(with_shuffle(Dataset(path, **kwargs), 10, seed))  # type: ignore[arg-type]

    assert drawn(1) == drawn(1)
    assert drawn(1) != drawn(2)
    assert len(drawn(1)) == 10 and drawn(1) == sorted(drawn(1))  # file order
    assert drawn(1) != list(range(10))
    within = drawn(3, row_ranges=parse_rows("50-99"))
    assert len(within) == 10 and all(i >= 50 for i in within)
    assert shuffled_pick(5, 10, 0) == frozenset(range(5))  # a limit past the rows: all
    # the README promises the same draw on every machine and Python: a change of the
    # algorithm (or of random's) shows here, not in a user's rerun
    assert shuffled_pick(100, 5, 7) == frozenset({6, 19, 41, 50, 83})


def test_selection_works_alike_on_parquet_and_csv(tmp_path: Path, write_jsonl: WriteJsonl) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"id": f"r{i}", "prompt": f"{i}"} for i in range(40)]
    jsonl = write_jsonl(rows)
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet, row_group_size=7)
    csv_path = tmp_path / "d.csv"
    csv_path.write_text("id,prompt\n" + "".join(f"r{i},{i}\n" for i in range(40)))
    drawn = {}
    for path in (jsonl, parquet, csv_path):
        dataset = Dataset(path, row_ranges=parse_rows("5-30"), shard=(2, 3))
        assert dataset.total_rows() == 40 and dataset.eligible_rows() == 26
        drawn[path.suffix] = _indexes(with_shuffle(dataset, 9, seed=11))
    assert drawn[".jsonl"] == drawn[".parquet"] == drawn[".csv"]
    assert len(drawn[".csv"]) == 3 and all(5 <= i <= 30 for i in drawn[".csv"])


def test_shuffle_draws_into_a_new_dataset_and_leaves_the_one_given_as_it_was(
    write_jsonl: WriteJsonl,
) -> None:
    """A dataset a plan holds never changes: ``--shuffle`` makes the dataset it runs."""
    path = write_jsonl([{"prompt": f"{i}"} for i in range(30)])
    every_row = Dataset(path)
    drawn = with_shuffle(every_row, 4, seed=5)
    assert drawn is not every_row and every_row.pick is None
    assert len(_indexes(drawn)) == 4 and _indexes(every_row) == list(range(30))
    assert with_shuffle(every_row, None, seed=5) is every_row
    with pytest.raises(AttributeError):
        every_row.pick = frozenset({1})  # type: ignore[misc]
