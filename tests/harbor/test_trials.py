"""Real Harbor trials in real Docker containers, through the real ``osmo-run harbor``.

Each fixture below is one command; the tests read what it left as a user would: the exit
code, the plain display, the output JSONL, the summary, the trial directories and
``docker ps``. One run mixes many behaviours (one row each) to keep the suite short.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from osmo_run.sdk.deadlines import SANDBOX_KILL_MARGIN_SEC, with_margin
from tests.harbor.conftest import (
    CALCULATOR_TASK,
    HERE,
    TASKS_ROOT,
    WORKFLOW,
    FakeModel,
    HarborRun,
    cli_env,
    harbor_spec,
    run_harbor,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SECRET = "sk-osmo-run-test-7c1e0b9d4f2a"
"""The model API key handed to the runs that use a model endpoint (a recognisable value)."""
KEY_ENV = "OSMO_RUN_TEST_LLM_KEY"

MIXED_ROWS: list[dict[str, Any]] = [
    # first, so its ~20 s overlap the rest
    {"id": "block", "prompt": "hi", "label": "42", "metadata": {"workflow": "block"}},
    {"id": "pass", "prompt": "hi", "label": "42"},
    {"id": "wrong-label", "prompt": "hi", "label": "41"},
    {"id": "grader-value", "prompt": "hi", "label": "42", "metadata": {"grader": "raise_value"}},
    {
        "id": "grader-runtime",
        "prompt": "hi",
        "label": "42",
        "metadata": {"grader": "raise_runtime"},
    },
    {"id": "workflow-raises", "prompt": "hi", "label": "42", "metadata": {"workflow": "raise"}},
    {
        "id": "workflow-timeout",
        "prompt": "hi",
        "label": "42",
        "metadata": {"workflow": "sleep", "sleep_sec": 60},
    },
    {
        "id": "grader-timeout",
        "prompt": "hi",
        "label": "42",
        "metadata": {"grader": "sleep", "sleep_sec": 60},
    },
    {"id": "no-label", "prompt": "hi"},
    {
        "id": "second-task",
        "prompt": "hi",
        "label": "42",
        "metadata": {"harbor_task": "second", "workflow": "where"},
    },
    {"id": "escape", "prompt": "hi", "label": "42", "metadata": {"harbor_task": "../.."}},
    {"id": "unknown-task", "prompt": "hi", "label": "42", "metadata": {"harbor_task": "nope"}},
    {"id": "bad-image", "prompt": "hi", "label": "42", "metadata": {"harbor_task": "bad-image"}},
]


@pytest.fixture(scope="module")
def mixed_run(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> HarborRun:
    """13 rows, one behaviour each, grader configured, prebuild on (the default),
    concurrency 3, agent and grader deadlines 3 s."""
    return run_harbor(tmp_path_factory.mktemp("mixed"), MIXED_ROWS, harbor_spec())


@pytest.fixture(scope="module")
def parallel_run(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> HarborRun:
    """6 rows whose workflow sleeps 3 s each, at concurrency 3."""
    rows = [
        {
            "id": f"p{i}",
            "prompt": "hi",
            "label": "42",
            "metadata": {"workflow": "sleep", "sleep_sec": 3},
        }
        for i in range(6)
    ]
    spec = harbor_spec(timeouts={"agent_sec": 10, "grader_sec": 5})
    return run_harbor(tmp_path_factory.mktemp("parallel"), rows, spec)


TASK_ROWS: list[dict[str, Any]] = [
    {"id": "right", "prompt": "What is 6 * 7?"},
    {"id": "wrong", "prompt": "What is 6 * 7?", "metadata": {"answer": "41"}},
    {"id": "model", "prompt": "What is 6 * 7?", "metadata": {"workflow": "key", "chat": True}},
    {"id": "no-reward", "prompt": "hi", "metadata": {"harbor_task": "no-reward"}},
    {"id": "bad-image", "prompt": "hi", "metadata": {"harbor_task": "bad-image"}},
]


def _task_graded_run(directory: Path, fake_model: FakeModel, *flags: str) -> HarborRun:
    """No grader: the task's tests/test.sh grades /app/answer.txt. The spec's model endpoint
    is the fake model on the host's loopback (relayed into the containers) with a key."""
    spec = harbor_spec(
        workflow_config={"settings": {"answer_file": "/app/answer.txt"}},
        llm={"base_url": fake_model.base_url, "model": "test-model", "api_key_env": KEY_ENV},
    )
    del spec["grader"]
    return run_harbor(directory, TASK_ROWS, spec, *flags, env=cli_env(**{KEY_ENV: SECRET}))


@pytest.fixture(scope="module")
def task_run_prebuilt(
    docker_engine: None, tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModel
) -> HarborRun:
    return _task_graded_run(tmp_path_factory.mktemp("task-prebuilt"), fake_model, "--prebuild")


@pytest.fixture(scope="module")
def task_run_plain(
    docker_engine: None, tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModel
) -> HarborRun:
    """The same run without prebuild, keeping every trial directory."""
    directory = tmp_path_factory.mktemp("task-plain")
    return _task_graded_run(directory, fake_model, "--no-prebuild", "--keep-trials")


@pytest.fixture(scope="module")
def instruction_run(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> HarborRun:
    """No dataset and no grader: the calculator task's instruction is the only row, and its
    tests/test.sh grades the answer the workflow writes to /app/answer.txt."""
    spec = {
        "workflow": WORKFLOW,
        "code_dir": str(HERE),
        "workflow_config": {"settings": {"answer_file": "/app/answer.txt"}},
        "harbor": {"task_dir": str(CALCULATOR_TASK)},
    }
    return run_harbor(tmp_path_factory.mktemp("instruction"), None, spec)


def outcome(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["status"], row["reward"], row["error_category"], row["error_phase"])


# -- one row per behaviour ---------------------------------------------------------------


def test_mixed_run_exits_1_and_shows_each_failure(mixed_run: HarborRun) -> None:
    assert mixed_run.returncode == 1, mixed_run.stderr
    assert "concurrency 3" in mixed_run.stdout
    assert set(mixed_run.rows) == {row["id"] for row in MIXED_ROWS}
    assert "FAILURE row workflow-raises [agent_error, workflow]" in mixed_run.stdout
    assert "FAILURE row grader-timeout [timeout, grader]" in mixed_run.stdout
    summary = mixed_run.summary
    assert (summary["total"], summary["by_status"]) == (13, {"success": 4, "failure": 9})
    assert summary["error_categories"] == {
        "timeout": 3,
        "validation_error": 3,
        "agent_error": 2,
        "infra_error": 1,
    }


def test_passing_row_gets_reward_1_and_its_trial_dir_is_removed(mixed_run: HarborRun) -> None:
    row = mixed_run.rows["pass"]
    assert outcome(row) == ("success", 1.0, None, None)
    assert row["sample"]["messages"][-1] == {"role": "assistant", "content": "42"}
    trial_name = row["backend"]["trial_name"]
    assert trial_name.startswith("osmo-") and trial_name.endswith("-pass")
    assert "trial_dir" not in row["backend"]
    assert not (mixed_run.out_dir / "trials" / trial_name).exists()
    assert row["timings"]["setup_sec"] > 0


def test_label_mismatch_is_a_success_with_reward_0(mixed_run: HarborRun) -> None:
    assert outcome(mixed_run.rows["wrong-label"]) == ("success", 0.0, None, None)


@pytest.mark.parametrize(
    ("row_id", "category", "exception"),
    [
        ("grader-value", "validation_error", "ValueError"),
        ("grader-runtime", "agent_error", "RuntimeError"),
    ],
)
def test_raising_grader_fails_the_row_in_the_grader_phase(
    mixed_run: HarborRun, row_id: str, category: str, exception: str
) -> None:
    row = mixed_run.rows[row_id]
    assert outcome(row) == ("failure", None, category, "grader")
    assert row["error_message"].startswith(f"{exception}: the scripted grader")
    assert "harbor_workflows.py" in row["error_message"]  # names where it was raised
    assert row["sample"]["messages"][-1]["content"] == "42"  # the workflow's sample is kept


def test_raising_workflow_is_an_agent_error_in_the_workflow_phase(mixed_run: HarborRun) -> None:
    row = mixed_run.rows["workflow-raises"]
    assert outcome(row) == ("failure", None, "agent_error", "workflow")
    assert row["error_message"].startswith("RuntimeError: the scripted workflow failed")


def test_slow_workflow_times_out_at_its_deadline(mixed_run: HarborRun) -> None:
    row = mixed_run.rows["workflow-timeout"]
    assert outcome(row) == ("failure", None, "timeout", "workflow")
    assert "3s deadline" in row["error_message"]
    assert row["timings"]["total_sec"] < 30


def test_slow_grader_times_out_at_its_deadline(mixed_run: HarborRun) -> None:
    row = mixed_run.rows["grader-timeout"]
    assert outcome(row) == ("failure", None, "timeout", "grader")
    assert "3s deadline" in row["error_message"]


def test_workflow_blocking_the_event_loop_forever_is_killed_as_a_timeout(
    mixed_run: HarborRun,
) -> None:
    """``time.sleep`` forever: the in-container runner cannot enforce its deadline, so the
    hard kill outside it must (3 s + the runner's margin), before Harbor's own. Which kill
    it was is in the message, not in a wall-clock bound (that failed on a busy machine)."""
    row = mixed_run.rows["block"]
    assert outcome(row) == ("failure", None, "timeout", "workflow")
    hard_deadline = int(with_margin(3.0, SANDBOX_KILL_MARGIN_SEC) or 0) + 1
    assert f"killed at its hard deadline of {hard_deadline}s" in row["error_message"]


def test_row_without_label_is_not_graded_and_says_why(mixed_run: HarborRun) -> None:
    row = mixed_run.rows["no-label"]
    assert outcome(row) == ("success", None, None, None)
    assert row["grader_skipped"] == "row has no label"


def test_failed_rows_keep_their_trial_dir(mixed_run: HarborRun) -> None:
    failed_trials = [
        row
        for row in mixed_run.rows.values()
        if row["status"] == "failure" and "trial_name" in row["backend"]
    ]
    assert len(failed_trials) == 6
    for row in failed_trials:
        trial_dir = Path(row["backend"]["trial_dir"])
        assert trial_dir == mixed_run.out_dir / "trials" / row["backend"]["trial_name"]
        assert (trial_dir / "result.json").is_file(), row["row_id"]
        assert (trial_dir / "config.json").is_file(), row["row_id"]


def test_row_selects_a_second_task_under_the_tasks_root(mixed_run: HarborRun) -> None:
    row = mixed_run.rows["second-task"]
    assert outcome(row) == ("success", 1.0, None, None)
    # the second task's workdir, and its environment/ uploaded there
    assert row["info"] == {"cwd": "/srv", "marker": "second-task"}


def test_task_name_escaping_the_tasks_root_is_refused(mixed_run: HarborRun) -> None:
    row = mixed_run.rows["escape"]
    assert outcome(row) == ("failure", None, "validation_error", "setup")
    assert "'../..' leaves the tasks directory" in row["error_message"]


def test_unknown_task_name_is_refused_naming_the_problem(mixed_run: HarborRun) -> None:
    row = mixed_run.rows["unknown-task"]
    assert outcome(row) == ("failure", None, "validation_error", "setup")
    assert row["error_message"] == (
        f"row unknown-task: metadata.harbor_task 'nope' ({TASKS_ROOT / 'nope'}): "
        "task directory not found"
    )


def test_task_image_that_does_not_exist_is_infra_in_setup_with_prebuild(
    mixed_run: HarborRun,
) -> None:
    row = mixed_run.rows["bad-image"]
    assert outcome(row) == ("failure", None, "infra_error", "setup")
    assert "osmo-run/does-not-exist:1" in row["error_message"]
    assert "could not be pulled" in row["error_message"]


# -- concurrency ---------------------------------------------------------------------------


def test_rows_run_three_at_a_time(parallel_run: HarborRun) -> None:
    assert parallel_run.returncode == 0, parallel_run.stdout + parallel_run.stderr
    rows = list(parallel_run.rows.values())
    assert [row["reward"] for row in rows] == [1.0] * 6
    windows = [
        (row["sample"]["metrics"]["started_at"], row["sample"]["metrics"]["ended_at"])
        for row in rows
    ]
    at_once = max(sum(1 for s, e in windows if s <= start < e) for start, _ in windows)
    assert 2 <= at_once <= 3, windows
    one_after_another = sum(row["timings"]["total_sec"] for row in rows)
    assert parallel_run.wall_sec < 0.6 * one_after_another, (
        parallel_run.wall_sec,
        one_after_another,
    )


# -- the task's own grading, prebuild on and off, the model endpoint and its key -----------


@pytest.mark.parametrize("run_name", ["task_run_prebuilt", "task_run_plain"])
def test_without_a_grader_the_tasks_test_sh_grades(
    request: pytest.FixtureRequest, run_name: str
) -> None:
    run: HarborRun = request.getfixturevalue(run_name)
    assert run.returncode == 1, run.stderr
    assert outcome(run.rows["right"]) == ("success", 1.0, None, None)
    assert outcome(run.rows["wrong"]) == ("success", 0.0, None, None)
    no_reward = run.rows["no-reward"]
    assert outcome(no_reward) == ("failure", None, "validation_error", "grader")
    assert "reward.txt" in no_reward["error_message"]


@pytest.mark.parametrize("run_name", ["task_run_prebuilt", "task_run_plain"])
def test_environment_that_cannot_start_is_infra_error_in_setup(
    request: pytest.FixtureRequest, run_name: str
) -> None:
    run: HarborRun = request.getfixturevalue(run_name)
    row = run.rows["bad-image"]
    assert outcome(row) == ("failure", None, "infra_error", "setup")
    assert "osmo-run/does-not-exist:1" in row["error_message"]


def test_prebuild_on_and_off_give_the_same_results(
    task_run_prebuilt: HarborRun, task_run_plain: HarborRun
) -> None:
    def results(run: HarborRun) -> dict[str, tuple[Any, ...]]:
        return {
            row_id: (
                *outcome(row),
                row["grader_skipped"],
                ((row["sample"] or {}).get("metrics") or {}).get("key_len"),
            )
            for row_id, row in run.rows.items()
        }

    assert results(task_run_prebuilt) == results(task_run_plain)


def _kept_config(run: HarborRun, row_id: str) -> dict[str, Any]:
    trial_dir = Path(run.rows[row_id]["backend"]["trial_dir"])
    config: dict[str, Any] = json.loads((trial_dir / "config.json").read_text())
    return config


def test_prebuild_starts_trials_from_an_osmo_run_prebuilt_image(
    task_run_prebuilt: HarborRun, task_run_plain: HarborRun
) -> None:
    environment = _kept_config(task_run_prebuilt, "no-reward")["environment"]
    image = environment["kwargs"]["image"]
    assert image.startswith("osmo-run/prebuilt:")
    inspect = subprocess.run(["docker", "image", "inspect", image], capture_output=True)
    assert inspect.returncode == 0
    plain = _kept_config(task_run_plain, "no-reward")["environment"]
    # Harbor's Docker environment, whose execs keep secrets off the command line
    assert plain["import_path"].endswith(":SecretSafeDockerEnvironment"), plain
    assert "image" not in plain["kwargs"]


def test_keep_trials_keeps_successful_trial_dirs(task_run_plain: HarborRun) -> None:
    for row_id in ("right", "wrong", "model"):
        row = task_run_plain.rows[row_id]
        assert row["status"] == "success"
        assert (Path(row["backend"]["trial_dir"]) / "result.json").is_file()


@pytest.mark.parametrize("run_name", ["task_run_prebuilt", "task_run_plain"])
def test_workflow_reaches_the_loopback_model_with_the_key(
    request: pytest.FixtureRequest, run_name: str, fake_model: FakeModel
) -> None:
    run: HarborRun = request.getfixturevalue(run_name)
    row = run.rows["model"]
    # the key arrived inside the container whole, and the model's reply ("42") was graded
    assert row["sample"]["metrics"]["key_len"] == len(SECRET)
    assert outcome(row) == ("success", 1.0, None, None)
    calls = [(call["path"], call["model"], call["authorization"]) for call in fake_model.requests]
    assert ("/v1/chat/completions", "test-model", f"Bearer {SECRET}") in calls


@pytest.mark.parametrize("run_name", ["task_run_prebuilt", "task_run_plain"])
def test_the_key_is_written_to_no_file(request: pytest.FixtureRequest, run_name: str) -> None:
    run: HarborRun = request.getfixturevalue(run_name)
    files = [path for path in run.out_dir.rglob("*") if path.is_file()]
    names = {path.name for path in files}
    assert {"results.jsonl", "results.summary.json"} <= names
    if run_name == "task_run_plain":  # every trial kept, the key's row included
        key_trial = Path(run.rows["model"]["backend"]["trial_dir"])
        assert (key_trial / "config.json").is_file() and (key_trial / "result.json").is_file()
    leaking = [str(path) for path in files if SECRET.encode() in path.read_bytes()]
    assert leaking == []
    assert SECRET not in run.stdout + run.stderr


# -- no dataset ----------------------------------------------------------------------------


def test_without_a_dataset_the_tasks_instruction_is_the_only_row(
    instruction_run: HarborRun,
) -> None:
    assert instruction_run.returncode == 0, instruction_run.stdout + instruction_run.stderr
    assert list(instruction_run.rows) == ["calculator"]
    row = instruction_run.rows["calculator"]
    instruction = (CALCULATOR_TASK / "instruction.md").read_text()
    assert row["sample"]["messages"][0] == {"role": "user", "content": instruction}
    assert outcome(row) == ("success", 1.0, None, None)  # graded by the task's test.sh


# -- no container outlives a run -----------------------------------------------------------


@pytest.mark.parametrize(
    "run_name",
    ["mixed_run", "parallel_run", "task_run_prebuilt", "task_run_plain", "instruction_run"],
)
def test_no_container_outlives_a_run(request: pytest.FixtureRequest, run_name: str) -> None:
    run: HarborRun = request.getfixturevalue(run_name)
    assert run.leftovers == []
