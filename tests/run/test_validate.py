"""``osmo-run validate``: every problem of a spec, its workflow and grader, a dataset and a
Harbor task listed in one pass, exit 2 when there is one; in process and through the CLI."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from osmo_run.run.executing.validate import validate
from tests.conftest import CLI, REPO, cli_env, error_lines, jsonl_bytes
from tests.harbor.fake_daytona import REJECTED_KEY, fake_daytona

UNSET_KEY = "OSMO_RUN_TEST_UNSET_KEY"

FAULTY_SPEC = f"""\
workflow: tests.no_such_module:Flow
grader: tests.workflows:NotAWorkflow
code_dir: {REPO}
concurrancy: 2
timeouts:
  agent_sec: -1
llm:
  base_url: http://127.0.0.1:9/v1
  model: m
  api_key_env: {UNSET_KEY}
"""

SPEC_PROBLEMS = [
    "field 'concurrancy': unknown field; did you mean 'concurrency'?",
    "field 'timeouts.agent_sec': Input should be greater than 0",
    "workflow: cannot import module 'tests.no_such_module'",
    "grader: NotAWorkflow (tests.workflows:NotAWorkflow) is not a Grader subclass",
    f"llm.api_key_env: environment variable {UNSET_KEY} is not set",
]

BAD_ROWS: list[dict[str, object] | str] = [
    {"id": "a", "prompt": "hi"},
    "{not json",
    {"id": "b"},
    "[1, 2]",
    {"id": "a", "prompt": "again"},
    {"id": "c", "prompt": "hi"},
]

DATASET_PROBLEMS = [
    "data.jsonl:2: not valid JSON",
    "data.jsonl:3:",
    "data.jsonl:4:",
    "data.jsonl:5: duplicate id 'a' (first at line 1)",
]


@pytest.fixture
def faulty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """A spec, a dataset and a task directory, each with several faults."""
    monkeypatch.delenv(UNSET_KEY, raising=False)
    spec = tmp_path / "spec.yaml"
    spec.write_text(FAULTY_SPEC, encoding="utf-8")
    data = tmp_path / "data.jsonl"
    data.write_bytes(jsonl_bytes(BAD_ROWS))
    task = tmp_path / "task"
    task.mkdir()
    (task / "instruction.md").write_text("do it\n", encoding="utf-8")  # but no task.toml
    return spec, data, task


def _has(problems: list[str], fragment: str) -> bool:
    return any(fragment in problem for problem in problems)


def test_every_spec_fault_is_listed_not_only_the_first(
    faulty: tuple[Path, Path, Path],
) -> None:
    spec, _, _ = faulty
    result = validate(spec, None)
    for fragment in SPEC_PROBLEMS:
        assert _has(result.problems, fragment), (fragment, result.problems)
    assert len(result.problems) == len(SPEC_PROBLEMS), result.problems


def test_every_bad_dataset_line_is_listed(faulty: tuple[Path, Path, Path]) -> None:
    _, data, _ = faulty
    result = validate(None, data)
    for fragment in DATASET_PROBLEMS:
        assert _has(result.problems, fragment), (fragment, result.problems)
    assert len(result.problems) == len(DATASET_PROBLEMS), result.problems
    assert not _has(result.checked, "dataset")  # a dataset with bad rows is not "ok"


def test_a_task_dir_without_task_toml_is_a_problem_naming_the_directory(
    faulty: tuple[Path, Path, Path],
) -> None:
    _, _, task = faulty
    result = validate(None, None, task_dir=task)
    assert _has(result.problems, "no task.toml")
    assert all(str(task) in problem for problem in result.problems if "task.toml" in problem)


def test_a_missing_dataset_and_an_empty_one_are_problems(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    assert _has(validate(None, tmp_path / "missing.jsonl").problems, "missing.jsonl")
    assert _has(validate(None, empty).problems, "the dataset has no rows")


def test_a_spec_without_a_workflow_is_still_checked_as_far_as_possible(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("grader: tests.workflows:LabelGrader\nlimt: 3\n", encoding="utf-8")
    problems = validate(spec, None).problems
    assert _has(problems, "field 'workflow': required field is missing")
    assert _has(problems, "field 'limt': unknown field; did you mean 'limit'?")


def test_harbor_without_a_task_dir_is_a_problem() -> None:
    """``osmo-run harbor`` would refuse to start without one."""
    result = validate(REPO / "configs" / "example.yaml", None, harbor=True)
    assert result.problems == [
        "harbor: no task directory; give --task-dir DIR (or harbor.task_dir in the spec)"
    ]
    assert validate(REPO / "configs" / "example.yaml", None).problems == []


def test_daytona_without_credentials_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID"):
        monkeypatch.delenv(name, raising=False)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workflow: examples.calculator:CalculatorWorkflow\n"
        f"code_dir: {REPO}\n"
        f"harbor:\n  task_dir: {REPO / 'tasks' / 'calculator'}\n  env: daytona\n",
        encoding="utf-8",
    )
    result = validate(spec, None, harbor=True)
    assert result.problems == [
        "environment daytona: set DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN and "
        "DAYTONA_ORGANIZATION_ID)"
    ]
    # A key like a real one: the refusal masks the key wherever the answer quotes it, so a
    # one-letter key would mask that letter in "Invalid API key" too.
    monkeypatch.setenv("DAYTONA_API_KEY", "dtn_validate_key_0123456789")
    if importlib.util.find_spec("daytona") is None:  # the key cannot be checked without it
        assert validate(spec, None, harbor=True).problems == [
            "environment daytona: Harbor's 'daytona' extra is not installed; "
            "install it with: pip install 'harbor[daytona]'"
        ]
        return
    with fake_daytona() as fake:  # stands for Daytona's cloud, out of reach from here
        monkeypatch.setenv("DAYTONA_API_URL", fake.url)
        checked = validate(spec, None, harbor=True)
        assert checked.problems == []
        assert "daytona credentials accepted (one API call)" in checked.checked
        fake.answer_everything(REJECTED_KEY)
        assert validate(spec, None, harbor=True).problems == [
            f"environment daytona: Daytona's API at {fake.url} rejected the credentials "
            "(answered 401 Unauthorized: Invalid API key); check DAYTONA_API_KEY (or "
            "DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID)"
        ]
        assert fake.calls("GET") == 2  # one call per validation


# --- the CLI ----------------------------------------------------------------------------


def test_cli_lists_all_problems_of_spec_dataset_and_task_and_exits_2(
    cli: CLI, faulty: tuple[Path, Path, Path]
) -> None:
    spec, data, task = faulty
    proc = cli("validate", spec, data, "--task-dir", task, env=cli_env())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    problems = [
        line.removeprefix("problem: ")
        for line in proc.stderr.splitlines()
        if line.startswith("problem: ")
    ]
    for fragment in [*SPEC_PROBLEMS, *DATASET_PROBLEMS, "no task.toml"]:
        assert _has(problems, fragment), (fragment, proc.stderr)
    assert proc.stderr.splitlines()[-1] == f"{len(problems)} problems found"
    assert "no problems found" not in proc.stdout


def test_cli_clean_spec_and_dataset_exit_0(cli: CLI) -> None:
    proc = cli("validate", REPO / "configs" / "example.yaml", REPO / "datasets" / "example.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[-1] == "no problems found"
    assert "ok: workflow examples.calculator:CalculatorWorkflow" in lines
    assert "ok: grader osmo_run.graders:NumericMatch" in lines
    assert any(line.endswith("example.jsonl: 35 rows") for line in lines)


def _docker_answers() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        info = subprocess.run([docker, "info"], capture_output=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return info.returncode == 0


def test_cli_harbor_checks_the_specs_task_dir_and_environment(cli: CLI) -> None:
    proc = cli("validate", REPO / "configs" / "harbor-example.yaml", "--harbor")
    assert "ok: task " in proc.stdout and "calculator" in proc.stdout
    if _docker_answers():
        assert proc.returncode == 0, proc.stderr
        assert "ok: docker engine answers" in proc.stdout
        assert proc.stdout.splitlines()[-1] == "no problems found"
    else:
        assert proc.returncode == 2
        assert "problem: environment docker: no Docker engine answers" in proc.stderr


def test_cli_harbor_reports_the_docker_problem_without_an_engine(cli: CLI, tmp_path: Path) -> None:
    """No ``docker`` on PATH: the environment check says so (the task itself is fine)."""
    env = cli_env(PATH=str(tmp_path / "empty-bin"))
    proc = cli("validate", REPO / "configs" / "harbor-example.yaml", "--harbor", env=env)
    assert proc.returncode == 2
    assert "problem: environment docker: no Docker engine answers" in proc.stderr
    assert proc.stderr.splitlines()[-1] == "1 problem found"


def test_cli_without_anything_to_validate_exits_2(cli: CLI) -> None:
    proc = cli("validate")
    assert proc.returncode == 2
    assert proc.stderr == "error: give a spec, a dataset or --task-dir to validate\n"


def test_cli_does_not_call_a_dataset_with_bad_rows_ok(
    cli: CLI, faulty: tuple[Path, Path, Path]
) -> None:
    _, data, _ = faulty
    proc = cli("validate", REPO / "configs" / "example.yaml", data, env=cli_env())
    assert proc.returncode == 2
    assert [line for line in proc.stdout.splitlines() if line.startswith("ok: dataset")] == []
    assert "problem: " in proc.stderr and f"{data}:2: not valid JSON" in proc.stderr


def test_local_lists_the_same_spec_problems_as_validate(
    cli: CLI, faulty: tuple[Path, Path, Path]
) -> None:
    """Three fields pydantic refuses, and the rest found once those are set aside (the
    imports, the llm key): a run used to stop at the first three."""
    spec, _, _ = faulty
    data = spec.parent / "one.jsonl"
    data.write_bytes(jsonl_bytes([{"prompt": "hi"}]))
    checked = cli("validate", spec, env=cli_env())
    expected = [
        line.removeprefix("problem: ")
        for line in checked.stderr.splitlines()
        if line.startswith("problem: ")
    ]
    assert len(expected) == len(SPEC_PROBLEMS), checked.stderr
    run = cli("local", data, "--spec", spec, env=cli_env())
    assert run.returncode == 2
    assert [line.removeprefix("error: ") for line in error_lines(run.stderr)] == expected


SELECTIONS = [
    ("rows: 0-1", [0, 1], 2),
    ("shard: 2/3", [1, 4], 2),
    ("limit: 2\nshuffle: true\nseed: 0", [3, 5], 2),  # shuffled_pick(6, 2, 0): rows 3, 5
]


@pytest.mark.parametrize(
    ("selection", "good", "count"), SELECTIONS, ids=["rows", "shard", "shuffle"]
)
def test_cli_checks_the_rows_the_spec_selects_as_a_run_would(
    cli: CLI, tmp_path: Path, selection: str, good: list[int], count: int
) -> None:
    # validate once read the whole file whatever rows, shard, shuffle and seed selected
    rows: list[dict[str, object] | str] = [
        {"id": f"r{i}", "prompt": "hi"} if i in good else "{not json" for i in range(6)
    ]
    data = tmp_path / "data.jsonl"
    data.write_bytes(jsonl_bytes(rows))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"workflow: examples.calculator:CalculatorWorkflow\ncode_dir: {REPO}\n{selection}\n"
    )
    proc = cli("validate", spec, data, env=cli_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"ok: dataset {data}: {count} rows" in proc.stdout.splitlines()
    problems = validate(None, data).problems  # without the spec: every row
    assert len(problems) == 6 - len(good), problems
