"""A hostile workflow in a real Harbor trial cannot change its own grade or read the
judge's key (issue 28, item 3), and no key is on the host's process list (item 2).

Every row answers 41 against the label 42, so the fair reward is 0.0; each attack of
:mod:`tests.harbor.hostile_workflows` tried to make it 1.0 or to leak the judge's key.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.harbor.conftest import (
    HERE,
    FakeModel,
    HarborRun,
    cli_env,
    harbor_spec,
    run_harbor,
    run_id_of_containers,
    start_harbor,
    stop_process,
    wait_for_no_labelled_containers,
)

JUDGE_KEY_ENV = "OSMO_TEST_JUDGE_KEY"
JUDGE_KEY = "sk-judge-0f3c9e1d7b2a4c6e8f0a1b2c3d4e5f60"
LLM_KEY_ENV = "OSMO_TEST_LLM_KEY"
LLM_KEY = "sk-model-9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d"
ATTACKS = ("rewrite_code", "spy", "python", "pythonpath", "reward")


def hostile_spec(fake_model: FakeModel, **overrides: Any) -> dict[str, Any]:
    spec = harbor_spec(
        workflow="hostile_workflows:HostileWorkflow",
        grader="hostile_workflows:FairGrader",
        code_dir=str(HERE),
        concurrency=len(ATTACKS),
        timeouts={"agent_sec": 20, "grader_sec": 20},
        judge={"base_url": fake_model.base_url, "model": "judge", "api_key_env": JUDGE_KEY_ENV},
        llm={"base_url": fake_model.base_url, "model": "test-model", "api_key_env": LLM_KEY_ENV},
    )
    spec.update(overrides)
    return spec


def secret_forms(key: str, env_name: str) -> list[str]:
    """The key as a hostile process could write it: raw, and base64 of what it read."""
    forms = [key]
    for text in (key, f"{env_name}={key}"):
        for start in range(3):  # base64 of a text embedded at any offset mod 3
            encoded = base64.b64encode(b"x" * start + text.encode()).decode()
            forms.append(encoded[4 : len(encoded) - 4] if start else encoded[:-4])
    return forms


@pytest.fixture(scope="module")
def attack_run(
    docker_engine: None, tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModel
) -> HarborRun:
    rows = [
        {"id": attack, "prompt": "What is 6 * 7?", "label": "42", "metadata": {"attack": attack}}
        for attack in ATTACKS
    ]
    env = cli_env(**{JUDGE_KEY_ENV: JUDGE_KEY, LLM_KEY_ENV: LLM_KEY})
    directory = tmp_path_factory.mktemp("attacks")
    return run_harbor(directory, rows, hostile_spec(fake_model), "--keep-trials", env=env)


def _graded_fairly(run: HarborRun, row_id: str) -> None:
    row = run.rows[row_id]
    assert (row["status"], row["reward"], row["error_category"]) == ("success", 0.0, None), row


@pytest.mark.docker
def test_workflow_rewriting_the_staged_grader_code_does_not_change_its_grade(
    attack_run: HarborRun,
) -> None:
    _graded_fairly(attack_run, "rewrite_code")


@pytest.mark.docker
def test_replaced_python3_does_not_change_the_grade(attack_run: HarborRun) -> None:
    _graded_fairly(attack_run, "python")


@pytest.mark.docker
def test_sitecustomize_on_the_runner_path_does_not_change_the_grade(
    attack_run: HarborRun,
) -> None:
    _graded_fairly(attack_run, "pythonpath")


@pytest.mark.docker
def test_workflow_writing_the_reward_file_does_not_change_the_grade(
    attack_run: HarborRun,
) -> None:
    _graded_fairly(attack_run, "reward")


@pytest.mark.docker
def test_background_process_cannot_read_the_judge_key(attack_run: HarborRun) -> None:
    _graded_fairly(attack_run, "spy")
    assert attack_run.returncode == 0, attack_run.stdout + attack_run.stderr
    forms = secret_forms(JUDGE_KEY, "OSMO_RUN_JUDGE_API_KEY")
    output = attack_run.stdout + attack_run.stderr
    assert not [form for form in forms if form in output]
    leaked = []
    for path in attack_run.out_dir.parent.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace")
            leaked += [f"{path}: {form}" for form in forms if form in text]
    assert not leaked
    assert attack_run.leftovers == []


def _processes_holding(needles: list[str]) -> list[str]:
    """Host processes whose command line holds one of ``needles``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (
                (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
        except OSError:
            continue
        found += [f"{proc.name}: {cmdline[:200]}" for needle in needles if needle in cmdline]
    return found


@pytest.mark.docker
def test_no_api_key_on_the_host_process_list_while_trials_run(
    tmp_path: Path, fake_model: FakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    metadata = {"workflow": "sleep", "grader": "sleep", "sleep_sec": 4}
    rows = [{"id": "slow", "prompt": "What is 6 * 7?", "label": "42", "metadata": metadata}]
    spec = hostile_spec(
        fake_model,
        workflow="harbor_workflows:ScriptedWorkflow",
        grader="harbor_workflows:ScriptedGrader",
    )
    monkeypatch.setenv(JUDGE_KEY_ENV, JUDGE_KEY)  # start_harbor passes the environment on
    monkeypatch.setenv(LLM_KEY_ENV, LLM_KEY)
    process, output = start_harbor(tmp_path, rows, spec)
    seen_workflow = seen_grader = False
    holding: list[str] = []
    try:
        deadline = time.monotonic() + 150
        while process.poll() is None and time.monotonic() < deadline:
            listing = _processes_holding(["osmo_run.sdk.sandbox workflow"])
            seen_workflow = seen_workflow or bool(listing)
            seen_grader = seen_grader or bool(_processes_holding(["osmo_run.sdk.sandbox grader"]))
            holding += _processes_holding([LLM_KEY, JUDGE_KEY])
            time.sleep(0.05)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        stop_process(process)
    assert process.returncode == 0, stdout + stderr
    assert seen_workflow and seen_grader, "never saw the runners run: nothing was scanned"
    assert holding == []
    assert output.is_file()


@pytest.mark.docker
@pytest.mark.slow
def test_ctrl_c_while_the_grader_runs_in_its_own_environment(tmp_path: Path) -> None:
    """Ctrl-C while the grader runs: exit 130, the row cancelled, and neither the
    workflow's container nor the grader's is left."""
    row_id = f"grading-{uuid.uuid4().hex[:8]}"  # other runs may share the engine
    metadata = {"grader": "sleep", "sleep_sec": 60}
    rows = [{"id": row_id, "prompt": "What is 6 * 7?", "label": "42", "metadata": metadata}]
    spec = harbor_spec(timeouts={"agent_sec": 30, "grader_sec": 120})
    process, output = start_harbor(tmp_path, rows, spec)
    try:
        deadline = time.monotonic() + 120
        invocation = None
        while invocation is None or "osmo_run.sdk.sandbox" not in _top(invocation):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the grader never started"
            time.sleep(0.2)
            invocation = invocation or run_id_of_containers(f"-{row_id}__grader")
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=90)
    finally:
        stop_process(process)
    assert process.returncode == 130, stdout + stderr
    assert "Traceback" not in stdout + stderr
    row = json.loads(output.read_text().splitlines()[0])
    assert (row["status"], row["error_category"]) == ("cancelled", "cancelled")
    assert wait_for_no_labelled_containers(invocation, timeout_sec=30) == []


def _top(invocation: str) -> str:
    """The processes of ``invocation``'s grader containers (``docker top``)."""
    listing = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=osmo-run.invocation={invocation}",
         "--filter", "name=__grader"],
        capture_output=True, text=True, timeout=60, check=False,
    ).stdout.split()  # fmt: skip
    return "".join(
        subprocess.run(
            ["docker", "top", container], capture_output=True, text=True, timeout=60, check=False
        ).stdout
        for container in listing
    )
