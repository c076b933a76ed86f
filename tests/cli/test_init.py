"""``osmo-run init``: the project it writes runs green with ``osmo-run local`` and ``pytest``,
each in a process of its own, as a new user would run them; it refuses what it must not
overwrite with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CLI, cli_env, error_lines, read_jsonl


def test_init_writes_a_project_that_runs_green_with_local_and_pytest(
    cli: CLI, tmp_path: Path
) -> None:
    made = cli.subprocess("init", "my-agent")
    assert made.returncode == 0, made.stderr
    project = tmp_path / "my-agent"
    assert "osmo-run local data/rows.jsonl --spec spec.yaml" in made.stdout
    for name in ("pyproject.toml", "spec.yaml", "data/rows.jsonl", "my_agent/rollout.py"):
        assert (project / name).is_file(), name
    assert len((project / "data/rows.jsonl").read_text().splitlines()) == 5

    run = CLI(project).subprocess("local", "data/rows.jsonl", "--spec", "spec.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
    (results,) = project.glob("runs/*/results.jsonl")
    rows = read_jsonl(results)
    assert [row["reward"] for row in rows] == [1.0] * 5
    assert sorted(row["row_id"] for row in rows) == [f"add-{i}" for i in range(1, 6)]

    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "4 passed" in tests.stdout


def test_init_fills_an_existing_empty_directory(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    proc = cli("init", "empty")
    assert proc.returncode == 0, proc.stderr
    assert "workflow: empty.rollout:AdderWorkflow" in (tmp_path / "empty/spec.yaml").read_text()


def test_init_refuses_a_non_empty_directory_and_touches_nothing(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "notes.txt").write_text("mine")
    proc = cli("init", "demo")
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        "error: demo: exists and is not empty; choose a new name or empty it first"
    ]
    assert [p.name for p in (tmp_path / "demo").iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("9lives", "makes no Python package name"),
        ("json", "would shadow the module of that name"),
        ("osmo-run", "would shadow the module of that name"),
    ],
)
def test_init_refuses_a_name_that_makes_no_usable_package(
    cli: CLI, tmp_path: Path, name: str, says: str
) -> None:
    proc = cli("init", name)
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert line.startswith(f"error: {name}: ") and says in line
    assert not (tmp_path / name).exists()


def test_init_refuses_a_file(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    proc = cli("init", "taken")
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        "error: taken: exists and is a file; choose a new directory name"
    ]


def test_init_under_a_file_is_one_line_not_an_internal_error(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("x")
    proc = cli("init", "plain-file/demo")
    assert proc.returncode == 2, proc.stderr
    (line,) = error_lines(proc.stderr)
    assert line.startswith("error: plain-file/demo: cannot write ")
    assert line.endswith("choose a directory you can write to")


def test_init_with_a_name_too_long_for_the_file_system_is_one_line(
    cli: CLI, tmp_path: Path
) -> None:
    name = "a" * 300
    proc = cli("init", name)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = error_lines(proc.stderr)
    assert line.startswith(f"error: {name}: ") and "choose a shorter name" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("name", "package"), [("ünïcode", "ünïcode"), ("Ärger-2", "ärger_2")])
def test_init_keeps_a_unicode_name_that_is_an_identifier(
    cli: CLI, tmp_path: Path, name: str, package: str
) -> None:
    proc = cli("init", name)
    assert proc.returncode == 0, proc.stderr
    assert f"(package {package})" in proc.stdout
    project = tmp_path / name
    assert (project / package / "rollout.py").is_file()
    assert f"workflow: {package}.rollout:AdderWorkflow" in (project / "spec.yaml").read_text()
    pyproject = (project / "pyproject.toml").read_text()
    (line,) = [line for line in pyproject.splitlines() if line.startswith("name = ")]
    assert line.isascii(), "a distribution name is ASCII (PEP 508)"
    run = CLI(project)("local", "data/rows.jsonl", "--spec", "spec.yaml")
    assert run.returncode == 0, run.stdout + run.stderr
