"""The line-offset index: every record found by offset, bad lines listed, a growing file
extended, a replaced one re-read, the cache used and kept out of the run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from osmo_run.run.reporting.report import LoadedRun, summarize
from osmo_run.run.writing.records import OutputRecord
from osmo_run.view.index import RowIndex
from osmo_run.view.summary import run_summary
from tests.view import records
from tests.view.conftest import Runs


def test_the_test_records_are_in_the_output_format() -> None:
    for item in records.mixed(30):
        OutputRecord.model_validate(item)


def test_each_record_is_read_back_by_offset_and_bad_lines_are_listed(tmp_path: Path) -> None:
    good = records.mixed(3)
    results = tmp_path / "results.jsonl"
    results.write_text(
        records.line(good[0])
        + "this is not JSON\n"
        + "[1, 2, 3]\n"
        + "\n"
        + records.line(good[1])
        + json.dumps({**good[2], "status": "exploded"})
        + "\n"
        + records.line(good[2])
        + '{"row_id": "torn", "sta',
        encoding="utf-8",
    )
    index = RowIndex(results)
    assert index.refresh()
    assert index.count == 3
    assert [index.read(i)["row_id"] for i in range(3)] == ["r00000", "r00001", "r00002"]
    assert [index.cols.line[i] for i in range(3)] == [1, 5, 7]
    assert [(b.line, b.reason.split(":")[0]) for b in index.bad] == [
        (2, "not JSON"),
        (3, "a JSON value, but not an osmo-run record (no row_id)"),
        (6, "status 'exploded' is not one of ('success', 'failure', 'cancelled')"),
    ]
    assert index.bad[0].excerpt == "this is not JSON"
    assert index.pending == len('{"row_id": "torn", "sta')
    assert not index.refresh()  # nothing changed


def test_a_growing_file_is_extended_and_a_torn_line_waits_for_its_end(tmp_path: Path) -> None:
    rows = records.mixed(6)
    results = records.write(tmp_path / "results.jsonl", rows[:2])
    index = RowIndex(results)
    index.refresh()
    generation = index.generation
    whole = records.line(rows[2])
    with open(results, "a", encoding="utf-8") as out:
        out.write(whole[:25])
    assert index.refresh()
    assert (index.count, index.pending) == (2, 25)
    with open(results, "a", encoding="utf-8") as out:
        out.write(whole[25:] + records.line(rows[3]))
    assert index.refresh()
    assert (index.count, index.pending) == (4, 0)
    assert index.read(3)["row_id"] == "r00003"
    assert index.generation == generation  # extended, not rebuilt


def test_a_replaced_or_rewritten_file_is_read_again(tmp_path: Path) -> None:
    rows = records.mixed(5)
    results = records.write(tmp_path / "results.jsonl", rows)
    index = RowIndex(results)
    index.refresh()
    # --retry-errors rewrites the file atomically (a new inode), keeping fewer lines
    replacement = records.write(tmp_path / "new.jsonl", rows[:2])
    replacement.replace(results)
    assert index.refresh()
    assert index.count == 2
    # the same size, rewritten in place with other rows
    other = [records.record(i + 50) for i in range(2)]
    text = "".join(records.line(r) for r in other)
    with open(results, "r+", encoding="utf-8") as out:
        out.write(text)
        out.truncate()
    index.refresh()
    assert [index.read(i)["row_id"] for i in range(index.count)] == ["r00050", "r00051"]
    results.unlink()
    assert index.refresh()
    assert index.missing and index.count == 0


def test_the_cache_is_reused_and_never_written_into_the_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    results = records.write(run_dir / "results.jsonl", records.mixed(40))
    before = sorted(p.name for p in run_dir.iterdir())
    cache = tmp_path / "cache"
    first = RowIndex(results, cache)
    first.refresh()
    assert sorted(p.name for p in run_dir.iterdir()) == before
    assert len(list(cache.glob("*.idx"))) == 1

    parsed: list[int] = []
    original = RowIndex._row

    def counting(self: RowIndex, raw: bytes, offset: int) -> tuple[object, ...] | None:
        parsed.append(offset)
        return original(self, raw, offset)

    monkeypatch.setattr(RowIndex, "_row", counting)
    second = RowIndex(results, cache)
    second.refresh()
    assert parsed == []  # every line came from the cache
    assert second.count == 40
    assert list(second.cols.reward) == pytest.approx(list(first.cols.reward), nan_ok=True)
    with open(results, "a", encoding="utf-8") as out:
        out.write(records.line(records.record(40)))
    second.refresh()
    assert len(parsed) == 1 and second.count == 41  # only the new line was read


def test_a_corrupt_or_foreign_cache_is_ignored(tmp_path: Path) -> None:
    results = records.write(tmp_path / "run" / "results.jsonl", records.mixed(10))
    cache = tmp_path / "cache"
    RowIndex(results, cache).refresh()
    (cached,) = cache.glob("*.idx")
    cached.write_bytes(cached.read_bytes()[:-7])  # cut short
    index = RowIndex(results, cache)
    index.refresh()
    assert index.count == 10
    assert index.read(9)["row_id"] == "r00009"


def test_the_summary_is_the_one_osmo_run_report_computes(runs: Runs) -> None:
    loaded = LoadedRun.load(runs.a)
    expected, count, _ = summarize([loaded])
    index = RowIndex(loaded.paths.results)
    index.refresh()
    mine = run_summary(index, 1.0, 1, expected.output)
    assert count == index.count == 16
    assert mine.to_dict() == expected.to_dict()


def test_the_summary_matches_with_samples_skips_and_odd_usage(tmp_path: Path) -> None:
    rows = records.mixed(90)
    for i, row in enumerate(rows):
        row["row_index"], row["sample_index"] = i // 3, i % 3
        if i % 7 == 0:
            row["usage"] = None
        if i % 11 == 0 and row["status"] == "success":
            row["reward"], row["grader_skipped"] = None, "no label"
    rows.append({**records.record(90), "status": "cancelled", "reward": None})
    results = records.write(tmp_path / "run" / "results.jsonl", rows)
    (tmp_path / "run" / "results.manifest.json").write_text(
        json.dumps(
            {"schema_version": 1, "dataset_name": "d", "info": {"pass_threshold": 0.75},
             "defining": {"rows": 31, "samples_per_row": 3}}
        )
    )  # fmt: skip
    expected, _, _ = summarize([LoadedRun.load(results)])
    index = RowIndex(results)
    index.refresh()
    assert run_summary(index, 0.75, 3, expected.output).to_dict() == expected.to_dict()


def test_the_run_page_summary_is_cached_for_one_state_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmo_run.view import derived
    from osmo_run.view.catalog import Catalog
    from osmo_run.view.pages import RunView

    results = records.write(tmp_path / "run" / "results.jsonl", records.mixed(50))
    (entry,) = Catalog.open([results]).runs.values()
    cache = tmp_path / "cache"
    first = RunView(entry, cache)
    first.refresh()
    expected = first.summary().to_dict()
    computed: list[int] = []
    real = derived.compute

    def counting(index: RowIndex, *args: object) -> derived.Derived:
        computed.append(index.count)
        return real(index, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(derived, "compute", counting)
    again = RunView(entry, cache)
    again.refresh()
    assert again.summary().to_dict() == expected and computed == []  # from the cache
    with open(results, "a", encoding="utf-8") as out:
        out.write(records.line(records.record(50, reward=0.0)))
    again.refresh()
    assert again.summary().total == 51 and computed == [51]  # a new state: computed again


def test_odd_values_in_a_record_never_break_the_index(tmp_path: Path) -> None:
    odd = [
        {**records.record(0), "attempt": 10**30, "row_index": -(10**40), "reward": 10**400},
        {**records.record(1), "reward": True, "timings": {"total_sec": "slow"}},
        {**records.record(2), "usage": "lots", "status": "success"},
        {**records.record(3), "error_phase": ["workflow"], "sample": "not a sample"},
    ]
    index = RowIndex(records.write(tmp_path / "results.jsonl", [*odd, records.record(4)]))
    index.refresh()
    # none is a record a page could show in every field: each is listed, with the field
    assert index.count == 1 and [b.line for b in index.bad] == [1, 2, 3, 4]
    assert [b.reason.split(":")[1].strip() for b in index.bad] == [
        "reward",  # 10**400 is no float (the huge attempt and row_index are ints)
        "reward",
        "usage",
        "error_phase",
    ]
