"""Telemetry that JSON cannot hold never costs a rollout its reward: numpy scalars become
numbers, what cannot be written is dropped, and the row says what was dropped."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

from osmo_run import ExecutionResult, Grader, GraderContext, RolloutStatus
from osmo_run.sdk.telemetry import fit_metrics, metrics_fit
from osmo_run.testing import run_rollout
from tests.compat_workflows import CompatGrader, CompatWorkflow
from tests.conftest import CLI, jsonl_bytes, read_jsonl
from tests.workflows import ScriptedWorkflow


def _rollout(metadata: dict[str, Any]) -> ExecutionResult:
    return asyncio.run(
        run_rollout(CompatWorkflow, "hi", label="hi", grader=CompatGrader, metadata=metadata)
    )


def test_numpy_scalars_in_metrics_and_info_become_python_numbers() -> None:
    result = _rollout({"telemetry": "numpy", "grade": "return:1"})
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.sample is not None
    assert result.sample.metrics == {"loss": 0.25, "steps": 3, "solved": 1}
    assert [type(v) for v in result.sample.metrics.values()] == [float, int, int]
    assert result.info == {"raw": {"loss": 0.25, "steps": 3, "solved": True}}
    assert result.warnings == []
    json.dumps(result.to_dict(), allow_nan=False)  # writable as it is


def test_a_nan_metric_from_the_workflow_is_dropped_with_a_warning() -> None:
    result = _rollout({"telemetry": "nan", "grade": "return:1"})
    assert result.status is RolloutStatus.SUCCESS, result.error_message
    assert result.reward == 1.0
    assert result.sample is not None and result.sample.metrics == {"steps": 2}
    assert result.info == {"raw": {"steps": 2}}
    assert result.warnings == [
        "info must hold JSON values; dropped non-finite info['raw']['loss'] (nan)",
        "metrics must be finite numbers; dropped 'loss' (float nan)",
    ]


def test_a_nan_metric_set_by_the_grader_after_its_reward_keeps_the_reward(
    cli: CLI, tmp_path: Path
) -> None:
    """The row as written: success, the reward and the sample kept, the metric named in
    ``warnings`` (it used to be a failed row blaming the workflow, reward and sample gone)."""
    data = tmp_path / "data.jsonl"
    data.write_bytes(
        jsonl_bytes(
            [{"id": "r", "prompt": "hi", "label": "hi", "metadata": {"grade": "metric_nan"}}]
        )
    )
    proc = cli.local(
        data,
        "--workflow",
        "tests.compat_workflows:CompatWorkflow",
        "--grader",
        "tests.compat_workflows:CompatGrader",
        "-o",
        "out.jsonl",
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = read_jsonl(tmp_path / "out.jsonl")
    assert (row["status"], row["reward"], row["error_phase"]) == ("success", 1.0, None)
    assert row["sample"]["messages"][-1] == {"role": "assistant", "content": "hi"}
    assert row["sample"]["metrics"] == {"source": 1}
    assert row["warnings"] == ["metrics must be finite numbers; dropped 'score' (float nan)"]


def test_metrics_already_fit_are_copied_and_every_other_value_still_fitted() -> None:
    """The quick path for plain finite numbers gives what the careful one gives, never the
    workflow's own dict; a bool, a huge int, NaN or a key that is not a plain str still
    take the careful one."""

    class Key(str):
        pass

    mine = {"loss": 0.25, "steps": 3, "big": 2**1023 - 1}
    fitted, warning = fit_metrics(mine)
    assert (fitted, warning) == (mine, None) and fitted is not mine
    assert metrics_fit(mine) and metrics_fit({})
    assert fit_metrics({"solved": True}) == ({"solved": 1}, None)
    assert fit_metrics({Key("k"): 1.0}) == ({"k": 1.0}, None)
    assert type(next(iter(fit_metrics({Key("k"): 1.0})[0]))) is str
    huge, warning = fit_metrics({"huge": 2**1100, "x": 1.0})
    assert huge == {"x": 1.0} and warning is not None and "'huge' (int" in warning
    for bad in (math.nan, math.inf, -math.inf):
        assert not metrics_fit({"x": bad})
        assert fit_metrics({"x": bad, "y": 2.0})[0] == {"y": 2.0}
    assert not metrics_fit({"solved": True}) and not metrics_fit({1: 1.0})


def test_metrics_the_grader_replaces_are_fitted_as_the_ones_it_adds() -> None:
    """A grader that puts a dict of its own on the sample (with a NaN and a bool) gets it
    fitted like one it changed in place: the reward kept, the NaN named."""

    class ReplacingGrader(Grader):
        async def grade(self, ctx: GraderContext) -> float:
            assert ctx.sample is not None
            ctx.sample.metrics = {"score": math.nan, "exact": True}
            return 1.0

    result = asyncio.run(run_rollout(ScriptedWorkflow, "hi", label="hi", grader=ReplacingGrader))
    assert result.status is RolloutStatus.SUCCESS and result.reward == 1.0
    assert result.sample is not None and result.sample.metrics == {"exact": 1}
    assert result.warnings == ["metrics must be finite numbers; dropped 'score' (float nan)"]
