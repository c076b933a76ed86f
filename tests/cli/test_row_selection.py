"""``--rows`` and ``--shuffle --seed`` through ``osmo-run local``: recorded in the manifest,
and working with ``--resume`` and ``--shard``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import CLI, COUNTING, WriteJsonl, error_lines, read_jsonl


def _rows(calls: Path, n: int = 20) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "prompt": "hi", "metadata": {"calls": str(calls)}} for i in range(n)]


def _ids(output: Path) -> list[str]:
    return sorted((r["row_id"] for r in read_jsonl(output)), key=lambda i: int(i[1:]))


def _defining(output: Path) -> dict[str, Any]:
    manifest = json.loads(output.with_name(output.stem + ".manifest.json").read_text())
    return dict(manifest["defining"])


def _calls(calls: Path) -> dict[str, int]:
    return {p.name: len(p.read_text().splitlines()) for p in calls.iterdir()}


def test_rows_run_the_listed_indexes_and_are_recorded(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_rows(calls))
    output = tmp_path / "out.jsonl"
    proc = cli.local(data, *COUNTING, "--rows", "3,7,10-12", "-o", output)
    assert proc.returncode == 0, proc.stderr
    assert _ids(output) == ["r3", "r7", "r10", "r11", "r12"]
    assert [r["row_index"] for r in read_jsonl(output)] == [3, 7, 10, 11, 12]
    assert _defining(output)["row_selection"] == "3,7,10-12"


def test_shuffle_draws_the_same_rows_for_the_same_seed(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_rows(calls, 50))
    drawn = {}
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        output = tmp_path / name / "out.jsonl"
        args = ("--shuffle", "--seed", seed, "--limit", "5", "-o", output)
        proc = cli.local(data, *COUNTING, *args)
        assert proc.returncode == 0, proc.stderr
        drawn[name] = _ids(output)
    assert drawn["a"] == drawn["b"] and len(drawn["a"]) == 5
    assert drawn["a"] != drawn["c"]
    assert drawn["a"] != [f"r{i}" for i in range(5)]
    defining = _defining(tmp_path / "a" / "out.jsonl")
    assert (defining["shuffle_seed"], defining["limit"]) == (7, 5)


def test_shuffle_without_limit_is_refused(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl([{"prompt": "hi"}])
    proc = cli.local(data, *COUNTING, "--shuffle", "-o", tmp_path / "out.jsonl")
    assert proc.returncode == 2
    assert "shuffle draws a random subset of limit rows" in error_lines(proc.stderr)[0]


def test_bad_rows_flag_is_refused_in_one_line(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl([{"prompt": "hi"}])
    proc = cli.local(data, *COUNTING, "--rows", "5-3", "-o", tmp_path / "out.jsonl")
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert "field 'rows'" in line and "a range goes from a lower index to a higher one" in line


def test_a_selection_resumes_and_shards_split_it(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_rows(calls, 30))
    selection = ("--rows", "2-20", "--shuffle", "--seed", "3", "--limit", "8")
    whole = tmp_path / "whole" / "out.jsonl"
    assert cli.local(data, *COUNTING, *selection, "-o", whole).returncode == 0
    chosen = _ids(whole)
    assert len(chosen) == 8 and all(2 <= int(i[1:]) <= 20 for i in chosen)
    # killed after two records: --resume runs the other six of the same draw, once each
    lines = whole.read_text().splitlines(keepends=True)
    whole.write_text("".join(lines[:2]))
    whole.with_name("out.summary.json").unlink()
    proc = cli.local(data, *COUNTING, *selection, "-o", whole, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert _ids(whole) == chosen
    assert set(_calls(calls).values()) == {1, 2}  # six rows ran twice, two once
    assert sum(_calls(calls).values()) == 8 + 6
    # a different draw is another run: --resume refuses to mix them
    other = ("--rows", "2-20", "--shuffle", "--seed", "4", "--limit", "8")
    proc = cli.local(data, *COUNTING, *other, "-o", whole, "--resume")
    assert proc.returncode == 2
    assert any("shuffle_seed: 3 -> 4" in line for line in error_lines(proc.stderr))
    # two shards of the same selection run it all, each row once
    parts = []
    for k in ("1/2", "2/2"):
        output = tmp_path / k.replace("/", "-") / "out.jsonl"
        proc = cli.local(data, *COUNTING, *selection, "--shard", k, "-o", output)
        assert proc.returncode == 0, proc.stderr
        parts.append(_ids(output))
    assert sorted(parts[0] + parts[1], key=lambda i: int(i[1:])) == chosen
    assert len(parts[0]) == len(parts[1]) == 4


def test_regrade_finds_the_rows_of_a_mapped_csv_selection(cli: CLI, tmp_path: Path) -> None:
    """A run of a CSV with a column mapping, --rows and --shuffle: regrade reads the same
    rows, their labels through the same mapping, and grades every recorded rollout."""
    data = tmp_path / "d.csv"
    data.write_text("uid,q,a\n" + "".join(f"u/{i},hi{i},hi{i}\n" for i in range(30)))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workflow: tests.workflows:EchoWorkflow\ndataset: {id: uid, prompt: q, label: a}\n"
    )
    run_dir = tmp_path / "run"
    selection = ("--rows", "5-25", "--shuffle", "--seed", "2", "--limit", "6")
    proc = cli.local(data, "-s", spec, *selection, "-o", run_dir / "results.jsonl")
    assert proc.returncode == 0, proc.stderr
    ran = _ids_of(run_dir / "results.jsonl")
    assert len(ran) == 6
    proc = cli("regrade", run_dir, "--grader", "tests.workflows:ScriptedGrader")
    assert proc.returncode == 0, proc.stderr
    (regraded,) = tmp_path.glob("run-regrade-*/results.jsonl")
    rows = read_jsonl(regraded)
    assert _ids_of(regraded) == ran
    assert all(r["reward"] == 1.0 for r in rows)  # each label found: hi<i> in its answer


def _ids_of(output: Path) -> list[str]:
    return sorted(r["row_id"] for r in read_jsonl(output))
