"""Runs that survive: SIGKILL or Ctrl-C then ``--resume``, ``--retry-errors`` by category,
and what may and may not change before a run is continued."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from osmo_run.cli.options import expand_bare_retry_errors
from osmo_run.run.writing.records import OutputRecord
from tests.conftest import (
    CLI,
    COUNTING,
    COUNTING_GRADED,
    OSMO_RUN,
    REPO,
    WriteJsonl,
    call_counts,
    cli_env,
    error_lines,
    read_jsonl,
)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _start(cwd: Path, *args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(OSMO_RUN), "local", *map(str, args), "--code-dir", str(REPO)],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_until(proc: subprocess.Popen[str], done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            _, stderr = proc.communicate()
            pytest.fail(f"osmo-run never got there (exit {proc.returncode}): {stderr}")
        time.sleep(0.01)


def _one_line_per_rollout(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    ids = [record["row_id"] for record in records]
    duplicated = [row_id for row_id, count in Counter(ids).items() if count > 1]
    assert not duplicated, f"rows recorded more than once: {duplicated}"
    return {record["row_id"]: record for record in records}


def test_sigkill_mid_run_then_resume_records_every_row_exactly_once(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    failing = {f"r{i:02d}" for i in (7, 17, 27, 37)}
    rows = []
    for i in range(40):
        meta: dict[str, Any] = {"calls": str(calls), "sleep": 0.15 + 0.05 * (i % 4)}
        if f"r{i:02d}" in failing:
            meta["raise"] = "RuntimeError"
        rows.append({"id": f"r{i:02d}", "prompt": "hi", "label": "hi", "metadata": meta})
    data = write_jsonl(rows)
    output = tmp_path / "run" / "results.jsonl"
    args = (data, *COUNTING_GRADED, "-c", "4", "--display", "plain", "-o", output)

    proc = _start(tmp_path, *args)
    _wait_until(proc, lambda: _lines(output) >= 10, timeout=30)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    complete = output.read_text().split("\n")[:-1]  # a line the kill cut short is not one
    before = [json.loads(line) for line in complete]
    assert 10 <= len(before) < 40, "the kill came too late to test anything"
    finished_before = {record["row_id"] for record in before}
    assert not (tmp_path / "run" / "results.summary.json").exists()
    # a write cut short by the crash: half of a record, no newline
    torn = json.dumps({**before[0], "row_id": "r39"})
    with output.open("a") as handle:
        handle.write(torn[: len(torn) // 2])

    # report reads the crashed run from its files alone
    report = cli("report", output.parent)
    assert "Traceback" not in report.stderr
    assert f"partial run: {len(before)} of 40 rollouts recorded" in report.stdout

    proc2 = cli.local(*args, "--resume")
    assert proc2.returncode == 1, proc2.stderr  # four rows fail by design
    assert "repaired a torn last line" in proc2.stdout
    assert f"{40 - len(before)} rows ({len(before)} kept from before)" in proc2.stdout
    records = _one_line_per_rollout(read_jsonl(output))  # read_jsonl: no torn line left
    assert set(records) == {f"r{i:02d}" for i in range(40)}
    for record in records.values():
        OutputRecord.model_validate(record)
    assert {r for r, rec in records.items() if rec["status"] == "failure"} == failing
    ran = call_counts(calls)
    assert set(ran) == set(records)
    assert all(ran[row_id] == 1 for row_id in finished_before), "finished rows never rerun"
    assert all(count <= 2 for count in ran.values())
    summary = json.loads((tmp_path / "run" / "results.summary.json").read_text())
    assert summary["total"] == 40
    assert summary["by_status"] == {"success": 36, "failure": 4}
    assert summary["error_categories"] == {"agent_error": 4}
    assert summary["reward"]["mean_all"] == pytest.approx(36 / 40)


def test_ctrl_c_then_resume_reruns_the_cancelled_rows_once(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    rows = [
        {"id": f"fast-{i}", "prompt": "hi", "label": "hi", "metadata": {"calls": str(calls)}}
        for i in range(3)
    ]
    rows += [
        {
            "id": f"slow-{i}",
            "prompt": "hi",
            "label": "hi",
            "metadata": {"calls": str(calls), "sleep_first": 30},
        }
        for i in range(3)
    ]
    data = write_jsonl(rows)
    output = tmp_path / "out.jsonl"
    args = (data, *COUNTING_GRADED, "-c", "6", "--display", "plain", "-o", output)
    proc = _start(tmp_path, *args)
    _wait_until(proc, lambda: _lines(output) >= 3 and len(list(calls.iterdir())) == 6, 30)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 130, stderr
    first = read_jsonl(output)
    assert Counter(r["status"] for r in first) == {"success": 3, "cancelled": 3}

    resumed = cli.local(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "3 rows (3 kept from before)" in resumed.stdout
    records = _one_line_per_rollout(read_jsonl(output))
    assert set(records) == {r["id"] for r in rows}
    assert {r["status"] for r in records.values()} == {"success"}
    attempts = read_jsonl(tmp_path / "out.attempts.jsonl")
    assert sorted((r["row_id"], r["status"]) for r in attempts) == [
        (f"slow-{i}", "cancelled") for i in range(3)
    ]
    assert call_counts(calls) == {
        **{f"fast-{i}": 1 for i in range(3)},
        **{f"slow-{i}": 2 for i in range(3)},
    }
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert (summary["total"], summary["by_status"], summary["interrupted"]) == (
        6,
        {"success": 6},
        False,
    )


def _quick_rows(calls: Path, n: int = 4) -> list[dict[str, Any]]:
    return [
        {"id": f"q{i}", "prompt": "hi", "label": "hi", "metadata": {"calls": str(calls)}}
        for i in range(n)
    ]


def _crash_after(output: Path, keep: int) -> None:
    """Leave the first ``keep`` records, as a run killed after writing them would."""
    lines = output.read_text().splitlines(keepends=True)
    output.write_text("".join(lines[:keep]))
    output.with_name(output.stem + ".summary.json").unlink()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("--agent-timeout", "5"), ["  timeouts.agent_sec: 600.0 -> 5.0"]),
        (
            ("--grader", "tests.workflows:LabelGrader"),
            ["  grader: 'tests.workflows:ScriptedGrader' -> 'tests.workflows:LabelGrader'"],
        ),
        (("--samples", "2"), ["  samples_per_row: 1 -> 2"]),
    ],
    ids=["agent-timeout", "grader", "samples"],
)
def test_resume_refuses_a_change_that_defines_the_results_with_its_diff(
    cli: CLI,
    write_jsonl: WriteJsonl,
    tmp_path: Path,
    calls: Path,
    change: tuple[str, ...],
    expected: list[str],
) -> None:
    data = write_jsonl(_quick_rows(calls))
    output = tmp_path / "out.jsonl"
    base = (data, *COUNTING, "--grader", "tests.workflows:ScriptedGrader", "-o", output)
    assert cli.local(*base).returncode == 0
    _crash_after(output, 2)
    before = output.read_text()
    args: list[str | Path] = [*base[1:], "--resume", *change]
    if change[0] == "--grader":
        args.remove("tests.workflows:ScriptedGrader")
        args.remove("--grader")
    proc = cli.local(data, *args)
    assert proc.returncode == 2, proc.stdout
    lines = error_lines(proc.stderr)
    assert lines[0] == (
        f"error: this run differs from the one in {tmp_path} in what defines its results:"
    )
    assert [line.removeprefix("error: ") for line in lines[1:-1]] == expected
    assert lines[-1] == "error: pass --overwrite to start over, or choose another --output"
    assert output.read_text() == before, "a refused resume touches nothing"
    assert sum(call_counts(calls).values()) == 4


def test_resume_refuses_a_changed_dataset(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    rows = _quick_rows(calls)
    output = tmp_path / "out.jsonl"
    assert cli.local(write_jsonl(rows), *COUNTING_GRADED, "-o", output).returncode == 0
    _crash_after(output, 2)
    rows[3]["label"] = "changed"
    proc = cli.local(write_jsonl(rows), *COUNTING_GRADED, "-o", output, "--resume")
    assert proc.returncode == 2
    changed = [line for line in error_lines(proc.stderr) if line.startswith("error:   ")]
    assert len(changed) == 1
    assert changed[0].startswith("error:   dataset_sha256: '")
    assert " -> '" in changed[0]


def test_resume_without_a_matching_run_starts_one_and_names_what_differs_from_the_latest(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    """--resume is the one command a requeued job repeats: with no run of these settings
    it starts one (a sweep's next setting included), saying how it differs from the
    latest run of the dataset, which it leaves alone."""
    data = write_jsonl(_quick_rows(calls))
    assert cli.local(data, *COUNTING_GRADED).returncode == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    before = (run_dir / "results.jsonl").read_text()
    proc = cli.local(
        data, *COUNTING_GRADED, "--agent-timeout", "9", "--resume", "--display", "plain"
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "--resume: no run with these settings at runs/data-" in proc.stdout
    assert f"starting one; the latest run of this dataset, runs/{run_dir.name}, differs" in (
        proc.stdout
    )
    assert "  timeouts.agent_sec: 600.0 -> 9.0" in lines
    assert len(list((tmp_path / "runs").iterdir())) == 2
    assert (run_dir / "results.jsonl").read_text() == before
    assert sum(call_counts(calls).values()) == 8


def test_resume_accepts_changes_that_do_not_define_the_results(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_quick_rows(calls, 6))
    assert cli.local(data, *COUNTING_GRADED, "-c", "4").returncode == 0
    (results,) = (tmp_path / "runs").glob("*/results.jsonl")
    _crash_after(results, 2)
    # the same data under another name and place, other concurrency and display
    moved = tmp_path / "elsewhere" / "data.jsonl"
    moved.parent.mkdir()
    shutil.copy(data, moved)
    proc = cli.local(moved, *COUNTING_GRADED, "-c", "1", "--display", "none", "--resume")
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [results.parent.name]
    records = _one_line_per_rollout(read_jsonl(results))
    assert len(records) == 6
    assert sum(call_counts(calls).values()) == 6 + 4  # the first run, then the four not kept
    manifest = json.loads(results.with_name("results.manifest.json").read_text())
    assert manifest["info"]["concurrency"] == 1
    summary = json.loads(results.with_name("results.summary.json").read_text())
    assert summary["total"] == 6


def test_rerunning_an_existing_run_without_a_flag_is_refused(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_quick_rows(calls))
    assert cli.local(data, *COUNTING_GRADED).returncode == 0
    (results,) = (tmp_path / "runs").glob("*/results.jsonl")
    before = results.read_text()
    proc = cli.local(data, *COUNTING_GRADED)
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert line.startswith(f"error: {results.relative_to(tmp_path)}: already holds results")
    for flag in ("--resume", "--retry-errors", "--overwrite"):
        assert flag in line
    assert results.read_text() == before
    assert sum(call_counts(calls).values()) == 4
    proc = cli.local(data, *COUNTING_GRADED, "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert len(read_jsonl(results)) == 4
    assert sum(call_counts(calls).values()) == 8


def test_the_same_resume_command_starts_a_run_then_continues_it(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_quick_rows(calls))
    output = tmp_path / "out.jsonl"
    first = cli.local(data, *COUNTING, "-o", output, "--resume", "--display", "plain")
    assert first.returncode == 0, first.stderr
    assert f"--resume: no run with these settings at {tmp_path}; starting one" in first.stdout
    _crash_after(output, 2)  # the job was killed, then requeued with the same command
    again = cli.local(data, *COUNTING, "-o", output, "--resume", "--display", "plain")
    assert again.returncode == 0, again.stderr
    assert "2 rows (2 kept from before)" in again.stdout
    assert len(_one_line_per_rollout(read_jsonl(output))) == 4


def test_retry_errors_without_a_run_to_retry_is_refused(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl([{"prompt": "hi"}])
    proc = cli.local(data, *COUNTING, "--retry-errors")
    assert proc.returncode == 2
    assert "error: --retry-errors: no run with these settings at runs/data-" in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flag", ["--resume", "--retry-errors"])
def test_continuing_and_overwriting_at_once_is_refused_and_deletes_nothing(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path, flag: str
) -> None:
    data = write_jsonl(_quick_rows(calls))
    output = tmp_path / "out.jsonl"
    assert cli.local(data, *COUNTING, "-o", output).returncode == 0
    before = output.read_text()
    proc = cli.local(data, *COUNTING, "-o", output, flag, "--overwrite")
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: {flag} keeps the finished rows and --overwrite deletes them; pass one of them"
    ]
    assert output.read_text() == before
    assert sum(call_counts(calls).values()) == 4


def test_retry_errors_reruns_only_failed_rows_of_the_named_categories(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    def row(row_id: str, fail_with: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"calls": str(calls)}
        if fail_with:
            meta.update(fail_first=1, fail_with=fail_with)
        return {"id": row_id, "prompt": "hi", "label": "hi", "metadata": meta}

    data = write_jsonl(
        [
            row("ok-1"),
            row("late", "TimeoutError"),
            row("ok-2"),
            row("broken", "RuntimeError"),
            row("invalid", "ValueError"),
        ]
    )
    output = tmp_path / "out.jsonl"
    base = (data, *COUNTING_GRADED, "-o", output)
    assert cli.local(*base).returncode == 1
    first = {r["row_id"]: r for r in read_jsonl(output)}
    assert {k: v["error_category"] for k, v in first.items() if v["error_category"]} == {
        "late": "timeout",
        "broken": "agent_error",
        "invalid": "validation_error",
    }

    proc = cli.local(*base, "--retry-errors", "timeout")
    assert proc.returncode == 1, proc.stderr  # broken and invalid still fail
    assert "1 rows (4 kept from before)" in proc.stdout
    assert call_counts(calls) == {"ok-1": 1, "ok-2": 1, "late": 2, "broken": 1, "invalid": 1}
    records = _one_line_per_rollout(read_jsonl(output))
    assert (records["late"]["status"], records["late"]["reward"]) == ("success", 1.0)
    assert records["broken"] == first["broken"]
    attempts = read_jsonl(tmp_path / "out.attempts.jsonl")
    assert [(r["row_id"], r["error_category"]) for r in attempts] == [("late", "timeout")]

    proc = cli.local(*base, "--retry-errors=agent_error,validation_error")
    assert proc.returncode == 0, proc.stderr
    assert call_counts(calls) == {"ok-1": 1, "ok-2": 1, "late": 2, "broken": 2, "invalid": 2}
    records = _one_line_per_rollout(read_jsonl(output))
    assert len(records) == 5
    assert {r["status"] for r in records.values()} == {"success"}
    attempts = read_jsonl(tmp_path / "out.attempts.jsonl")
    assert sorted((r["row_id"], r["error_category"]) for r in attempts) == [
        ("broken", "agent_error"),
        ("invalid", "validation_error"),
        ("late", "timeout"),
    ]
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert (summary["total"], summary["by_status"], summary["error_categories"]) == (
        5,
        {"success": 5},
        {},
    )

    # a bare --retry-errors (last, before an option, before the dataset): every category;
    # nothing failed any more, so nothing runs
    for args in [
        (*base, "--retry-errors"),
        (*base, "--retry-errors", "--display", "plain"),
        ("--retry-errors", *base),
    ]:
        proc = cli("local", *args, "--code-dir", REPO)
        assert proc.returncode == 0, proc.stderr
        assert "0 rows (5 kept from before)" in proc.stdout
    assert sum(call_counts(calls).values()) == 8


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["local", "d.jsonl", "--retry-errors"], ["local", "d.jsonl", "--retry-errors", "all"]),
        (["--retry-errors", "d.jsonl"], ["--retry-errors", "all", "d.jsonl"]),
        (["--retry-errors", "-c", "2"], ["--retry-errors", "all", "-c", "2"]),
        (["--retry-errors", "timeout,infra_error"], ["--retry-errors", "timeout,infra_error"]),
        (["--retry-errors", "flaky"], ["--retry-errors", "flaky"]),  # refused later, by name
        (["--retry-errors=timeout"], ["--retry-errors=timeout"]),
        (["--", "--retry-errors"], ["--", "--retry-errors"]),
    ],
)
def test_a_bare_retry_errors_means_every_category(args: list[str], expected: list[str]) -> None:
    assert expand_bare_retry_errors(args) == expected


def test_retry_errors_with_an_unknown_category_is_refused(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    data = write_jsonl([{"prompt": "hi"}])
    proc = cli.local(data, *COUNTING, "--retry-errors", "timeout,flaky")
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert line.startswith("error: --retry-errors: flaky is not an error category (")


def test_resume_with_samples_runs_each_missing_sample_once(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_quick_rows(calls, 3))
    output = tmp_path / "out.jsonl"
    args = (data, *COUNTING_GRADED, "--samples", "3", "-c", "1", "-o", output)
    assert cli.local(*args).returncode == 0
    kept = read_jsonl(output)[:4]
    _crash_after(output, 4)
    proc = cli.local(*args, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "5 rollouts (3 samples per row) (4 kept from before)" in proc.stdout
    records = read_jsonl(output)
    keys = [(r["row_id"], r["sample_index"]) for r in records]
    assert sorted(keys) == [(f"q{i}", k) for i in range(3) for k in range(3)]
    assert records[:4] == kept
    ran = call_counts(calls)
    assert sum(ran.values()) == 9 + 5
    assert all(ran[f"{r['row_id']}~{r['sample_index']}"] == 1 for r in kept)


def test_resume_and_retry_errors_together_run_the_missing_and_the_failed_rows(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    rows = _quick_rows(calls, 5)
    rows[0]["metadata"].update(fail_first=1, fail_with="RuntimeError")
    data = write_jsonl(rows)
    output = tmp_path / "out.jsonl"
    args = (data, *COUNTING_GRADED, "-c", "1", "-o", output)
    assert cli.local(*args).returncode == 1
    _crash_after(output, 3)  # q0 (failed), q1, q2 kept; q3, q4 never finished
    proc = cli.local(*args, "--resume", "--retry-errors")
    assert proc.returncode == 0, proc.stderr
    records = _one_line_per_rollout(read_jsonl(output))
    assert set(records) == {f"q{i}" for i in range(5)}
    assert {r["status"] for r in records.values()} == {"success"}
    assert call_counts(calls) == {"q0": 2, "q1": 1, "q2": 1, "q3": 2, "q4": 2}
    assert [r["row_id"] for r in read_jsonl(tmp_path / "out.attempts.jsonl")] == ["q0"]


def test_retry_errors_alone_does_not_run_rows_that_never_finished_and_says_so(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    rows = _quick_rows(calls, 4)
    rows[0]["metadata"].update(fail_first=1, fail_with="RuntimeError")
    data = write_jsonl(rows)
    output = tmp_path / "out.jsonl"
    args = (data, *COUNTING_GRADED, "-c", "1", "-o", output)
    assert cli.local(*args).returncode == 1
    _crash_after(output, 2)
    proc = cli.local(*args, "--retry-errors")
    # the two rows that never finished are not run, and a run missing rows does not pass
    assert proc.returncode == 1, proc.stderr
    assert "1 rows (1 kept from before)" in proc.stdout
    assert NOT_RUN.format(n=2) in proc.stdout
    assert sorted(r["row_id"] for r in read_jsonl(output)) == ["q0", "q1"]
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert (summary["total"], summary["not_run"]) == (2, 2)
    report = cli("report", output)
    assert "partial run: 2 of 4 rollouts recorded" in report.stdout
    assert report.returncode == 1, "the rollouts missing count as failed, as in the run"


NOT_RUN = (
    "{n} rollouts not run: --retry-errors reruns only failed rollouts, and these never "
    "finished; add --resume to run them. The gates count them as failures."
)


def test_retry_errors_after_the_breaker_tripped_is_judged_on_every_row(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    """The breaker stops a run of 20 rows after 3; --retry-errors then reruns the 3 (now
    passing) and must not pass the gates on those 3 alone."""
    rows = _quick_rows(calls, 20)
    for row in rows[:3]:  # the endpoint is down for the first three, then comes back
        row["metadata"].update(fail_first=1, fail_with="APIConnectionError")
    data = write_jsonl(rows)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workflow: tests.workflows:CountingWorkflow\nbreaker: 3\nretries:\n  max_attempts: 1\n"
    )
    output = tmp_path / "run" / "results.jsonl"
    args = (data, "--spec", spec, *COUNTING_GRADED, "-c", "1", "-o", output)
    first = cli.local(*args)
    assert first.returncode == 5, first.stdout + first.stderr
    assert len(read_jsonl(output)) == 3

    gates = ("--fail-under", "0.9", "--min-pass-rate", "0.9", "--json")
    proc = cli.local(*args, "--retry-errors", *gates)
    verdict = json.loads(proc.stdout)
    assert (proc.returncode, verdict["exit_code"], verdict["passed"]) == (1, 1, False)
    assert (verdict["summary"]["total"], verdict["summary"]["not_run"]) == (3, 17)
    assert {f["gate"] for f in verdict["gate_failures"]} == {
        "--fail-under (mean reward, failures as 0)",
        "--min-pass-rate",
    }
    assert NOT_RUN.format(n=17) in proc.stderr  # --json: the display goes to stderr
    report = cli("report", output.parent)
    assert "partial run: 3 of 20" in report.stdout
    assert report.returncode == 1, "the report's verdict is the run's"

    # --resume then runs the 17, and the run passes on all 20
    proc = cli.local(*args, "--resume", *gates)
    verdict = json.loads(proc.stdout)
    assert (proc.returncode, verdict["passed"]) == (0, True), proc.stderr
    assert (verdict["summary"]["total"], verdict["summary"]["not_run"]) == (20, 0)


def test_the_hint_for_a_resume_never_points_at_a_regraded_run(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_quick_rows(calls))
    assert cli.local(data, *COUNTING_GRADED).returncode == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert cli("regrade", run_dir, "--grader", "tests.workflows:LabelGrader").returncode == 0
    proc = cli.local(
        data, *COUNTING_GRADED, "--agent-timeout", "9", "--resume", "--display", "plain"
    )
    assert proc.returncode == 0, proc.stderr
    assert f"the latest run of this dataset, runs/{run_dir.name}, differs" in proc.stdout
    changes = [line for line in proc.stdout.splitlines() if line.startswith("  ") and "->" in line]
    assert changes == ["  timeouts.agent_sec: 600.0 -> 9.0"]


def test_a_row_rerun_by_retry_errors_carries_its_earlier_failures_like_an_in_run_retry(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    """In-run retries record ``attempt: 2`` and the failed try in ``attempts``; a rerun by
    --retry-errors now records the same, continuing the count across invocations."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workflow: tests.workflows:CountingWorkflow\n"
        "retries: {max_attempts: 2, initial_backoff_sec: 0.01, jitter: 0}\n",
        encoding="utf-8",
    )

    def row(row_id: str, fail_first: int, fail_with: str) -> dict[str, Any]:
        meta = {"calls": str(calls), "fail_first": fail_first, "fail_with": fail_with}
        return {"id": row_id, "prompt": "hi", "metadata": meta}

    data = write_jsonl(
        [
            row("in-run", 1, "RateLimitError"),  # retried inside the run, then succeeds
            row("rerun", 1, "RuntimeError"),  # agent_error: not retried in the run
            row("twice", 3, "RateLimitError"),  # fails both in-run tries, then once more
        ]
    )
    output = tmp_path / "out.jsonl"
    assert cli.local(data, "--spec", spec, "--code-dir", REPO, "-o", output).returncode == 1
    proc = cli.local(data, "--spec", spec, "-o", output, "--retry-errors")
    assert proc.returncode == 0, proc.stderr
    records = _one_line_per_rollout(read_jsonl(output))

    def trace(name: str) -> tuple[int, list[tuple[int, str]]]:
        record = records[name]
        return record["attempt"], [(a["attempt"], a["error_category"]) for a in record["attempts"]]

    assert trace("in-run") == (2, [(1, "rate_limit")])
    assert trace("rerun") == (2, [(1, "agent_error")])
    # two tries in the first run (both rate limited), the third and last in the rerun
    assert trace("twice") == (4, [(1, "rate_limit"), (2, "rate_limit"), (3, "rate_limit")])
    assert call_counts(calls) == {"in-run": 2, "rerun": 2, "twice": 4}
    assert set(records["rerun"]["attempts"][0]) == set(records["in-run"]["attempts"][0])
    assert records["rerun"]["attempts"][0]["error_message"].startswith(
        "RuntimeError: scripted RuntimeError on call 1"
    )
    for record in records.values():
        OutputRecord.model_validate(record)


def test_overwrite_removes_the_old_runs_artifacts_and_nothing_else(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    output = tmp_path / "out" / "results.jsonl"
    artifacts = output.parent / "artifacts"
    workflow = ("--workflow", "tests.workflows:ArtifactWorkflow")
    first = write_jsonl([{"id": "a", "prompt": "hi"}, {"id": "old", "prompt": "hi"}])
    assert cli.local(first, *workflow, "-o", output).returncode == 0
    (artifacts / "a" / "stale.txt").write_text("from the old run")
    (artifacts / "unrelated").mkdir()
    (artifacts / "unrelated" / "keep.txt").write_text("not a rollout of either run")
    second = write_jsonl([{"id": "a", "prompt": "hi"}], name="second.jsonl")
    assert cli.local(second, *workflow, "-o", output, "--overwrite").returncode == 0
    assert sorted(p.name for p in artifacts.iterdir()) == ["a", "unrelated"]
    assert sorted(p.name for p in (artifacts / "a").iterdir()) == ["note.txt"]
    assert (artifacts / "unrelated" / "keep.txt").is_file()


@pytest.mark.parametrize("field", ["row_index", "sample_index"])
@pytest.mark.parametrize("value", [10**12, -1, "7", None, 1.5])
def test_a_record_placed_outside_the_run_is_refused_not_obeyed(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path, field: str, value: object
) -> None:
    """A hand-edited results line once made --resume allocate a bit per row up to its
    row_index (10**12: a 125 GB bytearray), or stop with an internal error."""
    data = write_jsonl(_quick_rows(calls, 3))
    output = tmp_path / "out.jsonl"
    args = (data, *COUNTING_GRADED, "-c", "1", "-o", output)
    assert cli.local(*args).returncode == 0
    records = read_jsonl(output)
    records[1][field] = value
    output.write_text("".join(json.dumps(r) + "\n" for r in records))
    before = output.read_bytes()
    for flag in ("--resume", "--retry-errors"):
        proc = cli.local(*args, flag)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = error_lines(proc.stderr)
        if isinstance(value, int):
            assert line.startswith(f"error: {output}: the record of row 'q1' has {field} ")
        else:  # not a record at all: no field of it is obeyed
            assert line.startswith(
                f"error: {output}:2: not a result record ({field}: Input should be a valid integer)"
            )
        assert output.read_bytes() == before


def test_a_record_given_twice_is_refused_not_counted_twice(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_quick_rows(calls, 3))
    output = tmp_path / "out.jsonl"
    args = (data, *COUNTING_GRADED, "-c", "1", "-o", output)
    assert cli.local(*args).returncode == 0
    lines = output.read_text().splitlines(keepends=True)
    output.write_text("".join([*lines, lines[1]]))
    proc = cli.local(*args, "--resume")
    assert proc.returncode == 2, proc.stdout
    (line,) = error_lines(proc.stderr)
    assert line.startswith(f"error: {output}: row 'q1' (row_index 1, sample 0) is recorded twice")


def test_a_shard_resumes_with_row_indexes_past_its_own_row_count(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path, calls: Path
) -> None:
    data = write_jsonl(_quick_rows(calls, 6))
    output = tmp_path / "out.jsonl"
    args = (data, *COUNTING_GRADED, "-c", "1", "-o", output, "--shard", "2/2")
    assert cli.local(*args).returncode == 0
    _crash_after(output, 2)
    proc = cli.local(*args, "--resume")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(r["row_index"] for r in read_jsonl(output)) == [1, 3, 5]
    assert call_counts(calls) == {"q1": 1, "q3": 1, "q5": 2}  # q5 ran again, alone
