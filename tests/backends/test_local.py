"""LocalBackend: the callback contract, bounded concurrency, import paths, health."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from osmo_run import (
    AgentWorkflowConfig,
    ConcurrencyConfig,
    ExecutionResult,
    GraderConfig,
    RolloutStatus,
)
from osmo_run.backends.local import LocalBackend
from osmo_run.errors import ImportPathError
from tests.conftest import make_request
from tests.workflows import (
    ArtifactGrader,
    ArtifactWorkflow,
    ConcurrencyProbe,
    ConfigMutatingWorkflow,
    ScriptedGrader,
    ScriptedWorkflow,
)

Calls = list[tuple[str, RolloutStatus, float | None]]


def _execute(backend: LocalBackend, request: Any, with_grader_callback: bool) -> Calls:
    """Run one request; return the callbacks made as ``(name, status, reward)`` at call time."""
    calls: Calls = []

    def record(name: str) -> Any:
        return lambda result: calls.append((name, result.status, result.reward))

    on_grader = record("grader") if with_grader_callback else None
    asyncio.run(backend.execute(request, record("workflow"), on_grader))
    return calls


def test_graded_row_reports_grading_then_the_final_result() -> None:
    backend = LocalBackend(ScriptedWorkflow, grader=ScriptedGrader)
    calls = _execute(backend, make_request(), with_grader_callback=True)
    assert calls == [
        ("workflow", RolloutStatus.GRADING, None),
        ("grader", RolloutStatus.SUCCESS, 1.0),
    ]


def test_without_grader_callback_the_final_result_comes_once() -> None:
    backend = LocalBackend(ScriptedWorkflow, grader=ScriptedGrader)
    calls = _execute(backend, make_request(), with_grader_callback=False)
    assert calls == [("workflow", RolloutStatus.SUCCESS, 1.0)]


@pytest.mark.parametrize(
    ("metadata", "label", "status"),
    [
        ({"raise": "ValueError"}, "hi", RolloutStatus.FAILURE),
        ({}, None, RolloutStatus.SUCCESS),
    ],
    ids=["workflow-failed", "no-label"],
)
def test_ungraded_row_never_calls_the_grader_callback(
    metadata: dict[str, Any], label: Any, status: RolloutStatus
) -> None:
    backend = LocalBackend(ScriptedWorkflow, grader=ScriptedGrader)
    calls = _execute(backend, make_request(metadata, label=label), with_grader_callback=True)
    assert calls == [("workflow", status, None)]


def _peak_concurrency(backend: LocalBackend, rows: int = 12) -> int:
    ConcurrencyProbe.reset()

    async def run_all() -> None:
        requests = [make_request(row_id=f"r{i}") for i in range(rows)]
        await asyncio.gather(*(backend.execute(r, lambda _: None) for r in requests))

    asyncio.run(run_all())
    return ConcurrencyProbe.peak


@pytest.mark.parametrize(
    "config",
    [None, AgentWorkflowConfig(), AgentWorkflowConfig.from_dict({"settings": {"t": 0.5}})],
    ids=["no-config", "default-config", "config-without-concurrency"],
)
def test_default_concurrency_is_four(config: AgentWorkflowConfig | None) -> None:
    backend = LocalBackend(ConcurrencyProbe, config)
    assert backend.max_concurrency == 4
    assert _peak_concurrency(backend) == 4


def test_configured_concurrency_bounds_running_workflows() -> None:
    backend = LocalBackend(ConcurrencyProbe, AgentWorkflowConfig(ConcurrencyConfig(2)))
    assert backend.max_concurrency == 2
    assert _peak_concurrency(backend) == 2


def test_health_reports_the_concurrency_limit_and_rollouts_queued_and_running() -> None:
    """osmosis-ai's shape (schedulers read ``concurrency.max_concurrent``), plus ``running``."""
    backend = LocalBackend(ScriptedWorkflow, AgentWorkflowConfig(ConcurrencyConfig(3)))
    assert backend.health() == {
        "status": "ok",
        "backend": "local",
        "running": 0,
        "concurrency": {"max_concurrent": 3, "queued": 0, "running": 0},
    }

    async def during() -> dict[str, Any]:
        requests = [make_request({"sleep": 0.2}, row_id=f"r{i}") for i in range(5)]
        tasks = [asyncio.create_task(backend.execute(r, lambda _: None)) for r in requests]
        await asyncio.sleep(0.05)
        health = backend.health()
        await asyncio.gather(*tasks)
        return health

    health = asyncio.run(during())
    assert health["running"] == 3
    assert health["concurrency"] == {"max_concurrent": 3, "queued": 2, "running": 3}
    assert backend.health()["concurrency"] == {"max_concurrent": 3, "queued": 0, "running": 0}


def test_import_path_strings_resolve_and_run() -> None:
    backend = LocalBackend("tests.workflows:ScriptedWorkflow", grader="tests.workflows:LabelGrader")
    calls = _execute(backend, make_request(), with_grader_callback=False)
    assert calls == [("workflow", RolloutStatus.SUCCESS, 1.0)]


@pytest.mark.parametrize(
    ("workflow", "grader", "message"),
    [
        ("tests.workflows", None, "workflow: 'tests.workflows' is not of the form"),
        (
            "tests.no_such_module:Flow",
            None,
            "workflow: cannot import module 'tests.no_such_module' "
            "(no module named 'tests.no_such_module')",
        ),
        (
            "tests.workflows:NoSuchFlow",
            None,
            "workflow: module 'tests.workflows' has no attribute 'NoSuchFlow'",
        ),
        (
            "tests.workflows:NotAWorkflow",
            None,
            "workflow: NotAWorkflow (tests.workflows:NotAWorkflow) is not a AgentWorkflow "
            "subclass; subclass osmo_run.AgentWorkflow",
        ),
        (
            "tests.workflows:AbstractWorkflow",
            None,
            "workflow: AbstractWorkflow does not implement run",
        ),
        (
            "tests.workflows:ScriptedWorkflow",
            "tests.workflows:ScriptedWorkflow",
            "grader: ScriptedWorkflow (tests.workflows:ScriptedWorkflow) is not a Grader subclass",
        ),
    ],
    ids=["no-colon", "module-missing", "attr-missing", "not-a-subclass", "abstract", "grader"],
)
def test_bad_import_path_names_the_field_and_the_problem(
    workflow: str, grader: str | None, message: str
) -> None:
    with pytest.raises(ImportPathError) as info:
        LocalBackend(workflow, grader=grader)
    assert str(info.value).startswith(message)


def test_import_path_to_a_module_that_fails_to_import_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "needs_dep.py").write_text("import not_installed_dependency_xyz\n")
    (tmp_path / "crashes.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportPathError, match=r"importing 'needs_dep' failed: .*install what"):
        LocalBackend("needs_dep:Flow")
    with pytest.raises(ImportPathError, match="importing 'crashes' raised RuntimeError: boom"):
        LocalBackend("crashes:Flow")


def test_every_row_gets_a_fresh_workflow_with_its_own_config() -> None:
    config = AgentWorkflowConfig(settings={"seen": []})
    backend = LocalBackend(ConfigMutatingWorkflow, config)
    finals: list[ExecutionResult] = []

    async def run_all() -> None:
        for i in range(3):
            await backend.execute(make_request(row_id=f"r{i}"), finals.append)

    asyncio.run(run_all())
    assert [r.sample.metrics["seen"] for r in finals if r.sample] == [1, 1, 1]
    assert config.settings == {"seen": []}


def test_workflow_and_grader_share_the_rows_artifacts_dir(tmp_path: Path) -> None:
    backend = LocalBackend(ArtifactWorkflow, grader=ArtifactGrader, artifacts_root=tmp_path)
    calls = _execute(backend, make_request(row_id="row-7"), with_grader_callback=False)
    assert calls == [("workflow", RolloutStatus.SUCCESS, 1.0)]
    assert (tmp_path / "row-7" / "note.txt").read_text() == "note of row-7"


def test_progress_listener_hears_each_phase() -> None:
    backend = LocalBackend(ScriptedWorkflow, grader=ScriptedGrader, grader_config=GraderConfig())
    phases: list[tuple[str, str]] = []
    backend.set_progress_listener(lambda row_id, phase: phases.append((row_id, phase)))
    _execute(backend, make_request(), with_grader_callback=True)
    assert phases == [("r1", "workflow"), ("r1", "grader")]
