"""A run directory's files: where they are, a torn last line repaired, records read back
from a crashed run, and superseded records moved to the attempts file."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from osmo_run.errors import InputError
from osmo_run.run.writing.runfiles import RunPaths, iter_records, repair_torn_tail, rewrite_without
from tests.conftest import read_jsonl
from tests.view.records import record as view_record


def _line(row_id: str, sample: int = 0, status: str = "success", **extra: Any) -> str:
    """A complete record (:class:`OutputRecord`): readers keep only lines valid in every
    field."""
    category = extra.pop("error_category", "agent_error" if status == "failure" else None)
    base = view_record(0, status=status, category=category, phase="workflow")
    record = {**base, "row_id": row_id, "rollout_id": row_id, "sample_index": sample, **extra}
    return json.dumps(record) + "\n"


def test_run_files_are_named_after_the_results_file(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run" / "out.jsonl")
    assert paths.directory == tmp_path / "run"
    assert paths.summary == tmp_path / "run" / "out.summary.json"
    assert paths.manifest == tmp_path / "run" / "out.manifest.json"
    assert paths.attempts == tmp_path / "run" / "out.attempts.jsonl"
    assert paths.artifacts == tmp_path / "run" / "artifacts"
    assert paths.trials == tmp_path / "run" / "trials"


def test_locate_finds_a_run_by_file_or_directory(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "data-0123456789ab"
    run.mkdir(parents=True)
    (run / "results.jsonl").write_text(_line("a"))
    assert RunPaths.locate(run).results == run / "results.jsonl"
    assert RunPaths.locate(run / "results.jsonl").results == run / "results.jsonl"
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "out.jsonl").write_text(_line("a"))
    (custom / "out.manifest.json").write_text("{}")
    (custom / "out.attempts.jsonl").write_text("")  # no manifest of its own: not a run
    assert RunPaths.locate(custom).results == custom / "out.jsonl"


def test_locate_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such run directory or results file"):
        RunPaths.locate(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no osmo-run results here"):
        RunPaths.locate(empty)


def test_a_complete_file_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    content = _line("a") + _line("b")
    path.write_text(content)
    assert repair_torn_tail(path) is False
    assert path.read_text() == content
    assert repair_torn_tail(tmp_path / "missing.jsonl") is False
    (tmp_path / "empty.jsonl").write_text("")
    assert repair_torn_tail(tmp_path / "empty.jsonl") is False


def test_a_torn_last_line_is_cut_and_every_complete_line_kept(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    complete = _line("a") + _line("b")
    path.write_text(complete + _line("c")[:17])
    assert repair_torn_tail(path) is True
    assert path.read_text() == complete
    assert [r["row_id"] for r in read_jsonl(path)] == ["a", "b"]


def test_a_torn_line_longer_than_the_read_chunk_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    complete = _line("a")
    path.write_text(complete + _line("b", blob="x" * 200_000)[:150_000])
    assert repair_torn_tail(path) is True
    assert path.read_text() == complete


def test_a_file_holding_only_a_torn_line_becomes_empty(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(_line("a")[:10])
    assert repair_torn_tail(path) is True
    assert path.read_bytes() == b""


def test_records_of_a_crashed_run_are_read_without_the_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(
        _line("a") + "not json\n" + "[1, 2]\n" + '{"no_row_id": 1}\n' + _line("b") + _line("c")[:9]
    )
    assert [r["row_id"] for r in iter_records(path)] == ["a", "b"]
    with pytest.raises(InputError, match="results file not found"):
        list(iter_records(tmp_path / "missing.jsonl"))


def test_rewrite_moves_the_dropped_records_to_the_attempts_file(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "out.jsonl")
    lines = [
        _line("a"),
        _line("b", status="failure", error_category="timeout"),
        _line("c", 0),
        _line("c", 1, status="cancelled"),
        "garbage that is kept\n",
        _line("d"),
    ]
    paths.results.write_text("".join(lines))
    moved = rewrite_without(paths, {("b", 0), ("c", 1), ("zzz", 0)})
    assert moved == 2
    assert paths.results.read_text() == "".join(lines[i] for i in (0, 2, 4, 5))
    assert [(r["row_id"], r["status"]) for r in read_jsonl(paths.attempts)] == [
        ("b", "failure"),
        ("c", "cancelled"),
    ]
    for path in (paths.results, paths.attempts):  # lines hold conversations
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not list(tmp_path.glob("*.tmp"))
    # a later rewrite appends: every superseded attempt stays on record
    with paths.results.open("a") as handle:
        handle.write(_line("b", status="failure", error_category="agent_error"))
    assert rewrite_without(paths, {("b", 0)}) == 1
    assert [r.get("error_category") for r in read_jsonl(paths.attempts)] == [
        "timeout",
        None,
        "agent_error",
    ]
    assert "b" not in {r.get("row_id") for r in iter_records(paths.results)}


def test_rewrite_without_anything_to_drop_touches_nothing(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "out.jsonl")
    paths.results.write_text(_line("a"))
    assert rewrite_without(paths, set()) == 0
    assert not paths.attempts.exists()
    assert paths.results.read_text() == _line("a")
