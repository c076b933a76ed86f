"""The OpenAI Agents and Strands examples inside real Harbor trials, against the embedded
model through the loopback relay (issue 13).

Nothing in the trial image (``osmo-run/bookworm``: Debian's Python 3.11 alone) has either
framework: osmo-run sees that the examples import ``osmo_run.integrations.*``, installs
that extra's requirements for the image's Python on the host, and bakes them into the
prebuilt image. Each run has a fresh osmo-run cache, so the download is real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.harbor.conftest import CALCULATOR_TASK, REPO, HarborRun, cli_env, run_harbor
from tests.llm.conftest import require_embedded

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROWS: list[dict[str, Any]] = [
    {"id": "fr", "user_prompt": "What is the capital of France?", "ground_truth": "Paris"},
    {"id": "it", "user_prompt": "What is the capital of Italy?", "ground_truth": "Rome"},
]
FRAMEWORKS = {
    "openai-agents": ("examples.agents_openai:AgentsWorkflow", "agents"),
    "strands": ("examples.agents_strands:StrandsWorkflow", "strands"),
}


def _spec(workflow: str, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workflow": workflow,
        "grader": "examples.llm_chat:ContainsLabelGrader",
        "code_dir": str(REPO),
        "llm": "embedded",
        "concurrency": 2,
        "workflow_config": {"settings": {"temperature": 0.0, "max_tokens": 32}},
        "timeouts": {"agent_sec": 180, "grader_sec": 30},
        "harbor": {"task_dir": str(CALCULATOR_TASK)},
    }
    spec.update(overrides)
    return spec


def _run(directory: Path, spec: dict[str, Any]) -> HarborRun:
    env = cli_env(OSMO_RUN_CACHE_DIR=str(directory / "cache"))
    return run_harbor(directory, ROWS, spec, env=env, timeout=900)


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_framework_example_runs_inside_trials(tmp_path: Path, framework: str) -> None:
    require_embedded()
    workflow, _ = FRAMEWORKS[framework]
    run = _run(tmp_path, _spec(workflow))
    failed = {
        k: (r["error_category"], r["error_message"])
        for k, r in run.rows.items()
        if r["status"] != "success"
    }
    assert run.returncode in (0, 1) and not failed, (failed, run.stderr[-3000:])
    assert set(run.rows) == {"fr", "it"}
    for row in run.rows.values():
        assert row["backend"]["trial_name"]  # it ran in a trial container
        assert row["sample"]["messages"][-1]["content"].strip()
        assert row["usage"]["model_calls"] >= 1 and row["usage"]["completion_tokens"] > 0
    assert run.summary["usage"]["model_calls"] >= 2
    assert run.leftovers == []


def test_without_its_requirements_the_trial_has_no_framework(tmp_path: Path) -> None:
    """``requirements: none`` (the image has everything) on an image that has nothing:
    the rows fail as before this issue, naming the missing module, so the test above
    passes because of the installed requirements and not an image that had them."""
    require_embedded()
    workflow, module = FRAMEWORKS["openai-agents"]
    run = _run(tmp_path, _spec(workflow, requirements="none"))
    assert run.returncode == 1
    for row in run.rows.values():
        assert row["status"] == "failure"
        assert f"No module named '{module}'" in row["error_message"]
