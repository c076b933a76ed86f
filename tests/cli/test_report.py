"""``osmo-run report`` (one run, a crashed run, two runs compared, shards merged) and
``osmo-run regrade``, from a run's files alone."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from osmo_run.run.reporting.report import LoadedRun, summarize
from osmo_run.run.writing.records import OutputRecord
from tests.conftest import (
    CLI,
    COUNTING_GRADED,
    REPO,
    WriteJsonl,
    call_counts,
    cli_env,
    error_lines,
    read_jsonl,
)

# what a summary says about results; durations and paths differ between runs
RESULT_KEYS = (
    "total",
    "by_status",
    "error_categories",
    "grader_skipped",
    "graded",
    "coverage",
    "reward",
    "pass",
    "samples_per_row",
)


def _summary_text(stdout: str) -> str:
    """The rendered summary without its duration and output rows (they differ per run)."""
    start = stdout.index("Run summary")
    kept = [
        line
        for line in stdout[start:].splitlines()
        if not line.startswith(("duration", "output", "  "))
    ]
    return "\n".join(line.rstrip() for line in kept)


def _mixed_rows(calls: Path) -> list[dict[str, Any]]:
    meta = {"calls": str(calls)}
    return [
        {"id": "right", "prompt": "hi", "label": "hi", "metadata": meta},
        {"id": "wrong", "prompt": "hi", "label": "bye", "metadata": meta},
        {"id": "boom", "prompt": "hi", "label": "hi", "metadata": {**meta, "raise": "KeyError"}},
        {"id": "unlabeled", "prompt": "hi", "metadata": meta},
        {"id": "right-2", "prompt": "hello", "label": "hello", "metadata": meta},
        {"id": "bad", "prompt": "hi", "label": "hi", "metadata": {**meta, "raise": "ValueError"}},
    ]


def test_report_on_a_finished_run_matches_its_summary(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_mixed_rows(calls))
    run = cli.local(data, *COUNTING_GRADED, "--display", "none")
    assert run.returncode == 1, run.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    saved = json.loads((run_dir / "results.summary.json").read_text())

    proc = cli("report", run_dir)
    assert proc.returncode == 1, proc.stderr  # the run's own exit code
    assert "partial run" not in proc.stdout
    assert _summary_text(proc.stdout) == _summary_text(run.stdout)
    assert f"output      {run_dir}/results.jsonl" in proc.stdout
    assert cli("report", run_dir / "results.jsonl").stdout == proc.stdout

    summary, count, expected = summarize([LoadedRun.load(run_dir)])
    assert (count, expected) == (6, 6)
    again = summary.to_dict()
    for key in RESULT_KEYS:
        assert again[key] == saved[key], key
    assert again["duration_sec"] == saved["duration_sec"]


def test_report_on_a_crashed_run_shows_what_is_there_and_what_is_missing(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_mixed_rows(calls))
    output = tmp_path / "out.jsonl"
    assert cli.local(data, *COUNTING_GRADED, "-c", "1", "-o", output).returncode == 1
    # as a crash leaves it: four rows written, a fifth cut short, no summary
    lines = output.read_text().splitlines(keepends=True)
    output.write_text("".join(lines[:4]) + lines[4][:40])
    (tmp_path / "out.summary.json").unlink()

    proc = cli("report", output)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 1  # a row failed among those recorded
    assert "Run summary" in proc.stdout
    assert re.search(r"rows\s+4 \(success 3 · failure 1\)", proc.stdout), proc.stdout
    assert "agent_error" in proc.stdout
    assert "partial run: 4 of 6 rollouts recorded; `--resume` runs the rest" in proc.stdout
    assert output.read_text().endswith(lines[4][:40]), "report only reads"


def test_report_names_unreadable_lines_with_their_numbers(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_mixed_rows(calls))
    output = tmp_path / "out.jsonl"
    assert cli.local(data, *COUNTING_GRADED, "-c", "1", "-o", output).returncode == 1
    lines = output.read_text().splitlines(keepends=True)
    lines[2] = "garbage, not JSON\n"  # line 3
    lines[4] = '{"note": "not a result"}\n'  # line 5
    output.write_text("".join(lines))
    proc = cli("report", output)
    assert "Traceback" not in proc.stderr
    assert re.search(r"rows\s+4 ", proc.stdout), proc.stdout
    out = " ".join(proc.stdout.split())  # the rendered lines may wrap
    assert (
        f"unreadable lines in {output}, left out of this summary: 3 (not valid JSON), "
        "5 (not a result record)" in out
    )
    assert (  # --resume refuses such a file (below)
        "partial run: 4 of 6 rollouts recorded; remove the unreadable lines, then `--resume` "
        "runs the rest" in out
    )


def test_resume_refuses_a_results_file_with_a_garbage_line_and_changes_nothing(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_mixed_rows(calls))
    output = tmp_path / "out.jsonl"
    assert cli.local(data, *COUNTING_GRADED, "-o", output).returncode == 1
    lines = output.read_text().splitlines(keepends=True)
    lines[1] = "garbage\n"
    output.write_text("".join(lines))
    before = output.read_bytes()
    proc = cli.local(data, *COUNTING_GRADED, "-o", output, "--resume")
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: {output}:2: not a result record (not valid JSON); remove the line (its "
        "rollout then runs again) or pass --overwrite to start over"
    ]
    assert output.read_bytes() == before
    assert sum(call_counts(calls).values()) == 6


def test_report_refuses_a_file_that_is_not_a_run(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl([{"id": "a", "prompt": "hi", "label": "x"}])
    proc = cli("report", data)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: {data}: not an osmo-run results file (line 1 is not a result record, and "
        "there is no data.manifest.json beside it); give a run directory or its results file"
    ]


def _grader_spec(tmp_path: Path, name: str, key: str) -> Path:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "workflow": "tests.workflows:CountingWorkflow",
                "grader": "tests.workflows:MetadataGrader",
                "grader_config": {"settings": {"key": key}},
                "concurrency": 1,
            }
        )
    )
    return spec


def test_compare_names_rows_that_flipped_and_the_histogram_change(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    def row(row_id: str, a: float, b: float, **meta: Any) -> dict[str, Any]:
        metadata = {"calls": str(calls), "a": a, "b": b, **meta}
        return {"id": row_id, "prompt": "hi", "label": "hi", "metadata": metadata}

    data = write_jsonl(
        [
            row("steady", 1, 1),
            row("improved", 0, 1),
            row("regressed", 1, 0),
            row("partial", 0, 0.5),
            # fails on its first call only: an agent_error in A, a pass in B
            row("flaky", 1, 1, fail_first=1, fail_with="RuntimeError"),
        ]
    )
    run_a, run_b = tmp_path / "a" / "results.jsonl", tmp_path / "b" / "results.jsonl"
    assert cli.local(data, "--spec", _grader_spec(tmp_path, "a", "a"), "-o", run_a).returncode == 1
    assert cli.local(data, "--spec", _grader_spec(tmp_path, "b", "b"), "-o", run_b).returncode == 0

    proc = cli("report", run_a.parent, run_b.parent)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Run comparison" in out
    assert "5 in both · 0 only in A · 0 only in B" in out
    # B - A over common rows: (1 + 1 + 0 + 0.5 + 1) - (1 + 0 + 1 + 0 + 0), over 5
    assert "mean change B - A over common rows: +0.3 (no reward = 0)" in out
    passing = re.search(r"now passing\s+(\d+): (.*)", out)
    failing = re.search(r"now failing\s+(\d+): (.*)", out)
    assert passing is not None and failing is not None, out
    assert passing.group(1) == "2"
    assert set(passing.group(2).rstrip().split(", ")) == {"improved", "flaky"}
    assert (failing.group(1), failing.group(2).rstrip()) == ("1", "regressed")
    assert "partial: 0.0 -> 0.5" in out
    assert "regressed: 1.0 -> 0.0" in out
    assert "flaky: None -> 1.0" in out
    assert "steady:" not in out
    assert re.search(r"errors A -> B\s+agent_error\s+1 -> 0\s+\(-1\)", out), out

    # reversed, the flips swap sides
    back = cli("report", run_b.parent, run_a.parent).stdout
    assert re.search(r"now failing\s+2: ", back)
    assert re.search(r"now passing\s+1: regressed", back)
    assert re.search(r"agent_error\s+0 -> 1\s+\(\+1\)", back)


def test_compare_counts_rows_found_in_one_run_only(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_mixed_rows(calls))
    run_a, run_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert cli.local(data, *COUNTING_GRADED, "-o", run_a).returncode == 1
    assert cli.local(data, *COUNTING_GRADED, "--limit", "4", "-o", run_b).returncode == 1
    proc = cli("report", run_a, run_b)
    assert proc.returncode == 0, proc.stderr
    assert "4 in both · 2 only in A · 0 only in B" in proc.stdout
    assert re.search(r"now passing\s+0\s", proc.stdout), proc.stdout
    assert re.search(r"now failing\s+0\s", proc.stdout), proc.stdout
    # 6 rollouts in A, 4 in B: rates, not counts
    out = " ".join(proc.stdout.split())
    assert "validation_error 1 of 6 (16.7%) -> 0 of 4 (0.0%) (-16.7 points)" in out, out


def test_compare_runs_with_different_sample_counts_row_by_row_over_all_samples(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    """A ran 4 samples per row, B one. Pairing sample 0 with sample 0 called row x
    unchanged (its first sample passes in both); over all samples it went from 1 pass in
    4 (mean 0.25) to 1 in 1."""
    data = write_jsonl(
        [
            {"id": "x", "prompt": "hi", "label": "hi", "metadata": {"passes": 1}},
            {"id": "y", "prompt": "hi", "label": "hi", "metadata": {"passes": 4}},
            {"id": "z", "prompt": "hi", "label": "hi", "metadata": {"passes": 0}},
        ]
    )
    flags = ("--workflow", "tests.workflows:ScriptedWorkflow")
    flags += ("--grader", "tests.workflows:SampleGrader")
    run_a, run_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert cli.local(data, *flags, "--samples", "4", "-o", run_a).returncode == 0
    assert cli.local(data, *flags, "-o", run_b).returncode == 0
    proc = cli("report", run_a, run_b)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "3 in both · 0 only in A · 0 only in B" in out
    assert (
        "A has 4 samples per row, B 1: each row is compared over all its samples (mean "
        "reward, no reward = 0; it passes when at least half its samples pass)" in out
    )
    assert "mean change B - A over common rows: +0.25 (no reward = 0)" in out
    assert re.search(r"now passing 1: x ", out), out
    assert re.search(r"now failing 0 ", out), out
    assert "x: 0.25 -> 1.0" in out


def test_regrade_with_another_grader_changes_rewards_without_running_the_workflow(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    rows = _mixed_rows(calls)
    for row in rows:
        row["metadata"]["a"] = 0.5
    data = write_jsonl(rows)
    assert cli.local(data, "--spec", _grader_spec(tmp_path, "a", "a")).returncode == 1
    (run_dir,) = (tmp_path / "runs").iterdir()
    original = (run_dir / "results.jsonl").read_text()
    manifest = json.loads((run_dir / "results.manifest.json").read_text())
    ran = call_counts(calls)

    proc = cli("regrade", run_dir, "--grader", "tests.workflows:ScriptedGrader")
    assert proc.returncode == 1, proc.stderr
    assert call_counts(calls) == ran, "regrade must not run the workflow"
    assert (run_dir / "results.jsonl").read_text() == original
    (regraded,) = (tmp_path / "runs").glob(f"{run_dir.name}-regrade-*")
    assert re.fullmatch(rf"{re.escape(run_dir.name)}-regrade-[0-9a-f]{{8}}", regraded.name)
    new = {r["row_id"]: r for r in read_jsonl(regraded / "results.jsonl")}
    old = {r["row_id"]: r for r in read_jsonl(run_dir / "results.jsonl")}
    assert set(new) == set(old)
    for record in new.values():
        OutputRecord.model_validate(record)
    assert {k: old[k]["reward"] for k in ("right", "wrong", "right-2")} == {
        "right": 0.5,
        "wrong": 0.5,
        "right-2": 0.5,
    }
    assert {k: new[k]["reward"] for k in ("right", "wrong", "right-2")} == {
        "right": 1.0,
        "wrong": 0.0,
        "right-2": 1.0,
    }
    assert new["unlabeled"]["grader_skipped"] == "row has no label"
    for row_id in ("boom", "bad"):  # failed workflows are carried over as they were
        assert new[row_id] == old[row_id]
    assert new["right"]["sample"] == old["right"]["sample"]
    regraded_manifest = json.loads((regraded / "results.manifest.json").read_text())
    assert regraded_manifest["defining"]["regrade_of"] == manifest["run_id"]
    assert regraded_manifest["defining"]["grader"] == "tests.workflows:ScriptedGrader"
    assert regraded_manifest["defining"]["dataset_sha256"] == manifest["defining"]["dataset_sha256"]
    summary = json.loads((regraded / "results.summary.json").read_text())
    assert summary["reward"]["mean_graded"] == pytest.approx(2 / 3)
    assert "Run summary" in proc.stdout

    # the regraded run is a run like any other: report and compare read it
    report = cli("report", regraded)
    assert _summary_text(report.stdout) == _summary_text(proc.stdout)
    compare = cli("report", run_dir, regraded)
    assert re.search(r"now passing\s+2: ", compare.stdout), compare.stdout


def test_regrade_with_the_runs_own_grader_reproduces_its_rewards(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    """Samples keep their rollout ids (``row~k``) and the grader sees the artifacts the
    workflow wrote, as it did during the run."""
    data = write_jsonl(
        [{"id": f"p{c}", "prompt": "hi", "label": "x", "metadata": {"passes": c}} for c in range(4)]
    )
    sampled = tmp_path / "sampled" / "results.jsonl"
    args = ["--workflow", "tests.workflows:ScriptedWorkflow"]
    args += ["--grader", "tests.workflows:SampleGrader", "--samples", "3"]
    assert cli.local(data, *args, "-o", sampled).returncode == 0
    noted = tmp_path / "noted" / "results.jsonl"
    args = ["--workflow", "tests.workflows:ArtifactWorkflow"]
    args += ["--grader", "tests.workflows:ArtifactGrader"]
    assert cli.local(data, *args, "-o", noted).returncode == 0

    for run in (sampled, noted):
        proc = cli("regrade", run.parent)
        assert proc.returncode == 0, proc.stderr
        (regraded,) = run.parent.parent.glob(f"{run.parent.name}-regrade-*")
        before = {(r["row_id"], r["sample_index"]): r["reward"] for r in read_jsonl(run)}
        after = read_jsonl(regraded / "results.jsonl")
        assert {(r["row_id"], r["sample_index"]): r["reward"] for r in after} == before
        assert {r["rollout_id"] for r in after} == {r["rollout_id"] for r in read_jsonl(run)}
    assert sorted(before.values()) == [1.0] * 4


def test_regrade_refuses_when_the_dataset_changed(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    rows = _mixed_rows(calls)
    data = write_jsonl(rows)
    assert cli.local(data, *COUNTING_GRADED).returncode == 1
    (run_dir,) = (tmp_path / "runs").iterdir()
    rows[0]["label"] = "a different label"
    write_jsonl(rows)
    proc = cli("regrade", run_dir)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: {data}: the run's dataset is missing or changed since the run; regrade "
        "needs the same rows (their labels)"
    ]
    assert list((tmp_path / "runs").iterdir()) == [run_dir], "nothing was written"


def test_regrade_works_from_another_directory_and_next_to_a_custom_output(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    write_jsonl(_mixed_rows(calls))
    # a relative dataset path and a results file of its own name in the working directory
    assert (
        cli(
            "local", "data.jsonl", "--code-dir", REPO, *COUNTING_GRADED, "-o", "out.jsonl"
        ).returncode
        == 1
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = CLI(elsewhere)("regrade", tmp_path / "out.jsonl", env=cli_env())
    assert proc.returncode == 1, proc.stderr
    (regraded,) = tmp_path.glob("out-regrade-*")
    assert regraded.is_dir()
    assert len(read_jsonl(regraded / "results.jsonl")) == 6
    assert not list(tmp_path.parent.glob(f"{tmp_path.name}-regrade-*")), "stays in its directory"
    # and a second run in the same directory gets a regrade directory of its own
    assert cli.local(tmp_path / "data.jsonl", *COUNTING_GRADED, "-o", "other.jsonl").returncode == 1
    assert cli("regrade", "other.jsonl").returncode == 1
    assert len(list(tmp_path.glob("other-regrade-*"))) == 1


def _shard_rows(calls: Path) -> list[dict[str, Any]]:
    rows = []
    errors = {3: "RuntimeError", 7: "ValueError", 8: "RuntimeError"}  # one in each shard of 3
    for i in range(11):
        meta: dict[str, Any] = {"calls": str(calls), "a": (i % 5) / 4}
        if i in errors:
            meta["raise"] = errors[i]
        rows.append({"id": f"row-{i:02d}", "prompt": "hi", "label": "hi", "metadata": meta})
    return rows


def test_shards_cover_every_row_once_and_merge_into_the_unsharded_summary(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    rows = _shard_rows(calls)
    data = write_jsonl(rows)
    spec = _grader_spec(tmp_path, "spec", "a")
    shards = [tmp_path / "shards" / f"s{k}" / "results.jsonl" for k in (1, 2, 3)]
    for k, output in enumerate(shards, start=1):
        proc = cli.local(data, "--spec", spec, "--shard", f"{k}/3", "-o", output)
        assert proc.returncode == 1, proc.stderr
    whole = tmp_path / "whole" / "results.jsonl"
    unsharded = cli.local(data, "--spec", spec, "-o", whole)
    assert unsharded.returncode == 1

    ids = [[r["row_id"] for r in read_jsonl(output)] for output in shards]
    assert sorted(row_id for shard in ids for row_id in shard) == sorted(r["id"] for r in rows), (
        "every row exactly once"
    )
    assert [len(i) for i in ids] == [4, 4, 3]
    assert sorted(ids[1]) == ["row-01", "row-04", "row-07", "row-10"]  # index % 3 == 1
    assert call_counts(calls) == {r["id"]: 2 for r in rows}  # once sharded, once whole

    merged = cli("report", *(output.parent for output in shards))
    assert merged.returncode == 1, merged.stderr
    assert "partial run" not in merged.stdout
    assert _summary_text(merged.stdout) == _summary_text(unsharded.stdout)
    summary, count, expected = summarize([LoadedRun.load(output) for output in shards])
    assert (count, expected) == (11, 11)
    saved = json.loads((whole.parent / "results.summary.json").read_text())
    merged_dict = summary.to_dict()
    for key in ("total", "by_status", "error_categories", "grader_skipped", "graded"):
        assert merged_dict[key] == saved[key], key
    assert merged_dict["coverage"] == pytest.approx(saved["coverage"])
    assert merged_dict["pass"]["passed"] == saved["pass"]["passed"]
    assert merged_dict["pass"]["pass_at_k"]["1"] == pytest.approx(saved["pass"]["pass_at_k"]["1"])
    for key in ("mean_graded", "mean_all", "min", "max"):
        assert merged_dict["reward"][key] == pytest.approx(saved["reward"][key]), key
    for which in ("graded", "all"):
        for key in ("n", "mean", "stderr", "ci95"):
            got, want = merged_dict["reward"][which][key], saved["reward"][which][key]
            assert got == pytest.approx(want), (which, key)


def test_a_missing_shard_is_reported(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_shard_rows(calls))
    spec = _grader_spec(tmp_path, "spec", "a")
    shards = [tmp_path / f"s{k}.jsonl" for k in (1, 2, 3)]
    for k, output in enumerate(shards, start=1):
        assert cli.local(data, "--spec", spec, "--shard", f"{k}/3", "-o", output).returncode == 1
    proc = cli("report", shards[0], shards[2])
    assert "Traceback" not in proc.stderr
    assert "Run summary" in proc.stdout
    assert re.search(r"rows\s+7 ", proc.stdout), proc.stdout
    assert "missing shards: 2/3; this summary leaves their rows out" in proc.stdout


def test_report_on_one_shard_says_which_shards_its_summary_leaves_out(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_shard_rows(calls))
    spec = _grader_spec(tmp_path, "spec", "a")
    output = tmp_path / "s2.jsonl"
    assert cli.local(data, "--spec", spec, "--shard", "2/3", "-o", output).returncode == 1
    proc = cli("report", output)
    assert "Traceback" not in proc.stderr
    out = " ".join(proc.stdout.split())
    assert "missing shards: 1/3, 3/3; this summary leaves their rows out" in out
    assert "partial run" not in out  # the shard itself is complete


def test_an_empty_shard_is_a_run_of_zero_rows_that_passes(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    """An array job of 25 over 20 rows: shards 21-25 have nothing to do, and must not fail
    their jobs; their results merge with the others'."""
    rows = [
        {"id": f"r{i}", "prompt": "hi", "label": "hi", "metadata": {"calls": str(calls), "a": 1}}
        for i in range(20)
    ]
    data = write_jsonl(rows)
    output = tmp_path / "s21.jsonl"
    args = ("--spec", _grader_spec(tmp_path, "spec", "a"), "--shard", "21/25", "-o", output)
    proc = cli.local(data, *args, "--fail-under", "0.5", "--min-pass-rate", "0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert output.read_text() == ""
    summary = json.loads((tmp_path / "s21.summary.json").read_text())
    assert (summary["total"], summary["by_status"]) == (0, {})
    manifest = json.loads((tmp_path / "s21.manifest.json").read_text())
    assert (manifest["defining"]["shard"], manifest["defining"]["rows"]) == ("21/25", 0)
    assert list(calls.iterdir()) == []
    report = cli("report", output)
    assert report.returncode == 0, report.stderr


def test_shards_of_different_runs_are_not_merged(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_shard_rows(calls))
    one = tmp_path / "one.jsonl"
    two = tmp_path / "two.jsonl"
    again = tmp_path / "again.jsonl"
    other_n = tmp_path / "other-n.jsonl"
    spec_a, spec_b = _grader_spec(tmp_path, "a", "a"), _grader_spec(tmp_path, "b", "b")
    assert cli.local(data, "--spec", spec_a, "--shard", "1/2", "-o", one).returncode == 1
    assert cli.local(data, "--spec", spec_b, "--shard", "2/2", "-o", two).returncode == 1
    assert cli.local(data, "--spec", spec_a, "--shard", "1/2", "-o", again).returncode == 1
    assert cli.local(data, "--spec", spec_a, "--shard", "2/3", "-o", other_n).returncode == 1

    proc = cli("report", one, two)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        "error: these shard runs differ in what defines their results; not one run"
    ]
    proc = cli("report", one, again)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == ["error: shards 1/2, 1/2 are not distinct shards of one N"]
    proc = cli("report", one, other_n)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == ["error: shards 1/2, 2/3 are not distinct shards of one N"]
    assert proc.stdout == ""


def test_regraded_shards_merge_like_the_shards_they_came_from(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_shard_rows(calls))
    spec = _grader_spec(tmp_path, "spec", "a")
    shards = [tmp_path / "shards" / f"s{k}" / "results.jsonl" for k in (1, 2)]
    for k, output in enumerate(shards, start=1):
        assert cli.local(data, "--spec", spec, "--shard", f"{k}/2", "-o", output).returncode == 1
        regrade = cli("regrade", output.parent, "--grader", "tests.workflows:ScriptedGrader")
        assert regrade.returncode == 1, regrade.stderr
    regraded = sorted((tmp_path / "shards").glob("s*-regrade-*"))
    assert len(regraded) == 2
    proc = cli("report", *regraded)
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"rows\s+11 \(success 8 · failure 3\)", proc.stdout), proc.stdout
    assert "8/11 reached reward ≥ 1" in proc.stdout


@pytest.mark.parametrize("shard", ["0/3", "4/3", "2", "a/b"])
def test_a_bad_shard_is_refused_before_anything_runs(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path, shard: str
) -> None:
    data = write_jsonl(_shard_rows(calls))
    proc = cli.local(data, *COUNTING_GRADED, "--shard", shard)
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert line.startswith("error: command line: field 'shard': ")
    assert shard in line
    assert not (tmp_path / "runs").exists()
    assert not list(calls.iterdir())
