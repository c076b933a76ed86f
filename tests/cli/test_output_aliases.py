"""No command writes over a file it reads or over another file it writes: an output path
that names an input (the dataset, the spec, the env file, the run regraded or exported) or
another output is one ``error:`` line naming both, exit 2, before anything is written.
Relative paths, ``..``, symbolic links and hard links all name the same file."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CLI, error_lines

NOOP = ("--workflow", "tests.workflows:NoopWorkflow")


def _dataset(tmp_path: Path) -> Path:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "hi"}) + "\n" for i in range(3)))
    return data


def _same_path(tmp_path: Path, target: Path) -> Path:
    return target


def _relative(tmp_path: Path, target: Path) -> Path:
    (tmp_path / "sub").mkdir(exist_ok=True)
    return Path("sub") / ".." / target.relative_to(tmp_path)  # the CLI runs in tmp_path


def _symlink(tmp_path: Path, target: Path) -> Path:
    link = tmp_path / "linked" / target.name
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(target)
    return link


def _hard_link(tmp_path: Path, target: Path) -> Path:
    link = tmp_path / f"hard-{target.name}"
    os.link(target, link)
    return link


ALIASES: dict[str, Callable[[Path, Path], Path]] = {
    "same path": _same_path,
    "relative": _relative,
    "symlink": _symlink,
    "hard link": _hard_link,
}


def _refused(proc: object, *names: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = error_lines(proc.stderr)
    assert line.startswith("error: ")
    for name in names:
        assert name in line, line
    return line


@pytest.mark.parametrize("alias", ALIASES)
def test_output_naming_the_dataset_is_refused_and_the_dataset_kept(
    cli: CLI, tmp_path: Path, alias: str
) -> None:
    data = _dataset(tmp_path)
    before = data.read_bytes()
    output = ALIASES[alias](tmp_path, data)
    proc = cli.local(data, *NOOP, "--output", output, "--overwrite")
    _refused(proc, "--output", "the dataset")
    assert data.read_bytes() == before


@pytest.mark.parametrize("alias", ALIASES)
def test_a_report_naming_the_results_file_is_refused_and_the_results_kept(
    cli: CLI, tmp_path: Path, alias: str
) -> None:
    data = _dataset(tmp_path)
    results = tmp_path / "runs" / "results.jsonl"
    assert cli.local(data, *NOOP, "-o", results).returncode == 0
    before = results.read_bytes()
    junit = ALIASES[alias](tmp_path, results)
    proc = cli.local(data, *NOOP, "-o", results, "--resume", "--junit-xml", junit)
    _refused(proc, "--junit-xml", "--output")
    assert results.read_bytes() == before


def test_reports_naming_the_spec_env_file_or_each_other_are_refused(
    cli: CLI, tmp_path: Path
) -> None:
    data = _dataset(tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"workflow": NOOP[1]}))
    env_file = tmp_path / ".env"
    env_file.write_text("OSMO_RUN_TEST_X=1\n")
    kept = {p: p.read_bytes() for p in (data, spec, env_file)}
    out = tmp_path / "run" / "results.jsonl"
    cases = [
        (("--summary-md", spec), ("--summary-md", "the spec")),
        (("--junit-xml", env_file), ("--junit-xml", "the env file")),
        (("--junit-xml", tmp_path / "r.md", "--summary-md", tmp_path / "r.md"), ("--summary-md",)),
        (("--summary-md", out.with_name("results.summary.json")), ("--output's summary",)),
    ]
    for flags, names in cases:
        proc = cli.local(data, "--spec", spec, "--env-file", env_file, "-o", out, *flags)
        _refused(proc, *names)
        assert not out.parent.exists()
    assert {p: p.read_bytes() for p in kept} == kept


def test_github_step_summary_naming_the_dataset_is_refused(cli: CLI, tmp_path: Path) -> None:
    from tests.conftest import cli_env

    data = _dataset(tmp_path)
    before = data.read_bytes()
    proc = cli.local(data, *NOOP, env=cli_env(GITHUB_STEP_SUMMARY=str(data)))
    _refused(proc, "GITHUB_STEP_SUMMARY", "the dataset")
    assert data.read_bytes() == before


@pytest.mark.parametrize("alias", ["same path", "symlink", "hard link"])
def test_regrade_into_the_run_it_reads_is_refused_and_the_run_kept(
    cli: CLI, tmp_path: Path, alias: str
) -> None:
    data = _dataset(tmp_path)
    results = tmp_path / "runs" / "results.jsonl"
    assert cli.local(data, *NOOP, "-o", results).returncode == 0
    before = results.read_bytes()
    target = ALIASES[alias](tmp_path, results)
    grader = ("--grader", "tests.workflows:ScriptedGrader")
    proc = cli("regrade", results.parent, *grader, "-o", target, "--overwrite")
    _refused(proc, "--output", "the run regraded")
    assert results.read_bytes() == before
    proc = cli("regrade", results.parent, *grader, "-o", data, "--overwrite")
    _refused(proc, "--output", "the dataset")
    assert data.stat().st_size > 0


@pytest.mark.parametrize("alias", ["same path", "symlink", "hard link"])
def test_view_export_over_the_run_it_exports_is_refused(
    cli: CLI, tmp_path: Path, alias: str
) -> None:
    data = _dataset(tmp_path)
    results = tmp_path / "runs" / "results.jsonl"
    assert cli.local(data, *NOOP, "-o", results).returncode == 0
    before = results.read_bytes()
    target = ALIASES[alias](tmp_path, results)
    proc = cli("view", results.parent, "--export", target)
    _refused(proc, "--export", "the run exported")
    assert results.read_bytes() == before
    summary = results.with_name("results.summary.json")
    proc = cli("view", results, "--export", summary)
    _refused(proc, "--export")
    assert json.loads(summary.read_text())["total"] == 3


def test_harbor_output_naming_the_dataset_is_refused_before_any_trial(
    cli: CLI, tmp_path: Path
) -> None:
    from tests.conftest import REPO

    data = _dataset(tmp_path)
    before = data.read_bytes()
    task = REPO / "tests" / "harbor" / "tasks" / "second"
    args = ("harbor", data, "--task-dir", task, *NOOP, "--code-dir", REPO)
    proc = cli(*args, "--output", _symlink(tmp_path, data), "--overwrite")
    _refused(proc, "--output", "the dataset")
    assert data.read_bytes() == before


def test_regrade_masks_the_env_files_values(cli: CLI, tmp_path: Path) -> None:
    """A grader quoting a token from regrade's --env-file: *** in the regraded run."""
    from tests.conftest import REPO

    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "r1", "prompt": "hi", "label": "hi"}\n')
    results = tmp_path / "runs" / "results.jsonl"
    assert cli.local(data, *NOOP, "-o", results).returncode == 0
    token = "tok-0123456789abcdef"
    env_file = tmp_path / ".env"
    env_file.write_text(f"OSMO_RUN_TEST_TOOL_TOKEN={token}\n")
    out = tmp_path / "regraded" / "results.jsonl"
    grader = "tests.cli.hostile_workflows:TokenQuotingGrader"
    proc = cli(
        "regrade", results.parent, "--grader", grader, "--code-dir", REPO, "-o", out,
        "--env-file", env_file,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "refused ***" in out.read_text()
    holding = [p for p in out.parent.rglob("*") if p.is_file() and token in p.read_text()]
    assert holding == [] and token not in proc.stdout + proc.stderr
