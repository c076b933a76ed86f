"""How a workflow or grader that does not return is reported in a real Harbor trial
(issue 28): one that exits the process is ``agent_error`` of its phase (item 12), one the
kernel kills for its container's memory limit or that kills itself is ``agent_error``
after one attempt, not an engine fault retried three times (item 15), and a grader
killed at its hard deadline is named as the grader (item 20)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harbor.conftest import HERE, HarborRun, harbor_spec, run_harbor

ROWS: list[dict[str, Any]] = [
    {"id": "wf-exit-3", "metadata": {"attack": "exit", "code": 3}},
    {"id": "wf-os-exit-0", "metadata": {"attack": "os_exit", "code": 0}},
    {"id": "gr-exit-0", "metadata": {"grader_action": "exit", "code": 0}},
    {"id": "gr-os-exit-4", "metadata": {"grader_action": "os_exit", "code": 4}},
    {"id": "oom", "metadata": {"attack": "oom", "mb": 1024, "harbor_task": "small-memory"}},
    {"id": "suicide", "metadata": {"attack": "suicide"}},
    {"id": "gr-block", "metadata": {"grader_action": "block"}},
    {"id": "fine", "metadata": {"answer": "42"}},
]


@pytest.fixture(scope="module")
def ends_run(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> HarborRun:
    rows = [{**row, "prompt": "What is 6 * 7?", "label": "42"} for row in ROWS]
    spec = harbor_spec(
        workflow="hostile_workflows:HostileWorkflow",
        grader="hostile_workflows:FairGrader",
        code_dir=str(HERE),
        concurrency=4,
        timeouts={"agent_sec": 30, "grader_sec": 3},
    )
    return run_harbor(tmp_path_factory.mktemp("ends"), rows, spec, timeout=400)


def _failure(run: HarborRun, row_id: str) -> tuple[Any, ...]:
    row = run.rows[row_id]
    return row["status"], row["error_category"], row["error_phase"], row["attempt"]


@pytest.mark.docker
def test_run_goes_on_and_exits_1_not_5(ends_run: HarborRun) -> None:
    assert ends_run.returncode == 1, ends_run.stdout + ends_run.stderr
    assert "fix the cause" not in ends_run.stdout + ends_run.stderr
    assert ends_run.rows["fine"]["reward"] == 1.0
    assert ends_run.leftovers == []


@pytest.mark.docker
@pytest.mark.parametrize(
    ("row_id", "phase", "code"),
    [
        ("wf-exit-3", "workflow", 3),
        ("wf-os-exit-0", "workflow", 0),
        ("gr-exit-0", "grader", 0),
        ("gr-os-exit-4", "grader", 4),
    ],
)
def test_a_process_exit_is_agent_error_of_its_phase(
    ends_run: HarborRun, row_id: str, phase: str, code: int
) -> None:
    assert _failure(ends_run, row_id) == ("failure", "agent_error", phase, 1)
    message = ends_run.rows[row_id]["error_message"]
    assert message.startswith(f"the {phase} exited with code {code} without returning"), message


@pytest.mark.docker
def test_out_of_memory_is_the_workflows_agent_error_after_one_attempt(
    ends_run: HarborRun,
) -> None:
    assert _failure(ends_run, "oom") == ("failure", "agent_error", "workflow", 1)
    message = ends_run.rows["oom"]["error_message"]
    assert message.startswith("the workflow ran out of memory and was killed"), message
    assert "memory_mb" in message


@pytest.mark.docker
def test_a_workflow_that_kills_itself_is_agent_error_after_one_attempt(
    ends_run: HarborRun,
) -> None:
    assert _failure(ends_run, "suicide") == ("failure", "agent_error", "workflow", 1)
    message = ends_run.rows["suicide"]["error_message"]
    assert message.startswith("the workflow was killed by signal 9"), message


@pytest.mark.docker
def test_a_grader_killed_at_its_deadline_is_named_as_the_grader(ends_run: HarborRun) -> None:
    assert _failure(ends_run, "gr-block") == ("failure", "timeout", "grader", 1)
    message = ends_run.rows["gr-block"]["error_message"]
    assert "the grader blocked without returning" in message, message
    assert "workflow" not in message
