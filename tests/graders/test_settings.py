"""The stdlib settings validator, and graders that run where only the SDK is: importing
``osmo_run.graders`` loads no CLI dependency, and they grade on Python 3.11 with the
standard library alone (as inside a Harbor trial)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from osmo_run.graders.settings import SettingsError, parse_settings
from osmo_run.run.configuring.spec_file import load_spec
from tests.conftest import REPO
from tests.sdk.test_public_api import CLI_ONLY, _python311


@dataclass(frozen=True, kw_only=True)
class Inner:
    size: int = 1


@dataclass(frozen=True, kw_only=True)
class Example:
    name: str
    ratio: float = 0.5
    enabled: bool = False
    mode: Literal["fast", "slow"] = "fast"
    choice: int | str | None = None
    tags: list[str] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)


def test_values_of_the_right_type_are_kept() -> None:
    data = {
        "name": "x",
        "ratio": 2,
        "enabled": True,
        "mode": "slow",
        "choice": "a",
        "tags": ["t"],
        "weights": {"a": 1},
        "inner": {"size": 3},
    }
    parsed = parse_settings(Example, data)
    assert parsed == Example(
        name="x",
        ratio=2.0,
        enabled=True,
        mode="slow",
        choice="a",
        tags=["t"],
        weights={"a": 1.0},
        inner=Inner(size=3),
    )
    assert isinstance(parsed.ratio, float)
    assert parse_settings(Example, {"name": "x", "ratio": "1e-6"}).ratio == 1e-6  # YAML 1.1


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({}, "settings.name: required setting is missing"),
        ({"name": 1}, "settings.name: must be a string, got int 1"),
        ({"name": "x", "ratio": True}, "settings.ratio: must be a number, got bool True"),
        ({"name": "x", "ratio": "half"}, "settings.ratio: must be a number, got str 'half'"),
        ({"name": "x", "ratio": float("inf")}, "settings.ratio: must be a finite number, got inf"),
        ({"name": "x", "enabled": "yes"}, "settings.enabled: must be true or false, got str 'yes'"),
        (
            {"name": "x", "mode": "fats"},
            "settings.mode: must be one of 'fast', 'slow', got 'fats'; did you mean 'fast'?",
        ),
        (
            {"name": "x", "choice": 1.5},
            "settings.choice: must be an integer or a string or null, got float 1.5",
        ),
        ({"name": "x", "tags": "t"}, "settings.tags: must be a list, got str 't'"),
        ({"name": "x", "tags": ["a", 2]}, "settings.tags[1]: must be a string, got int 2"),
        ({"name": "x", "weights": {"a": "b"}}, "settings.weights.a: must be a number, got str 'b'"),
        (
            {"name": "x", "inner": {"sise": 2}},
            "settings.inner.sise: unknown setting; did you mean 'size'?",
        ),
        (
            {"name": "x", "colour": 1},
            "settings.colour: unknown setting; known: name, ratio, enabled",
        ),
    ],
)
def test_problems_name_the_field(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings(Example, data)
    assert str(raised.value).startswith(problem)


def test_not_a_mapping() -> None:
    with pytest.raises(SettingsError, match=r"^settings: must be a mapping of settings, got list"):
        parse_settings(Example, [1])


def test_a_yaml_spec_with_scientific_notation_runs(tmp_path: Path) -> None:
    """PyYAML reads ``1e-6`` as a string; the grader's number setting still takes it."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "workflow: tests.graders.answer_workflows:AnswerWorkflow\n"
        "grader: osmo_run.graders:NumericMatch\n"
        "grader_config:\n  settings: {abs_tol: 1e-6}\n",
        encoding="utf-8",
    )
    config = load_spec(spec).build_grader_config()
    assert config.settings == {"abs_tol": "1e-6"}  # checked, and parsed as 1e-06 per grader


def test_importing_the_graders_loads_no_cli_dependency() -> None:
    code = "import sys, osmo_run.graders; print(__import__('json').dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    loaded = {name.split(".")[0] for name in json.loads(out)}
    assert not loaded & {*CLI_ONLY, "math_verify", "sympy", "jsonschema"}


def test_stdlib_graders_grade_on_python_311_with_the_stdlib_only() -> None:
    """``-S`` leaves out every site-packages directory: only the stdlib and the repo."""
    python = _python311()
    if python is None:
        pytest.skip("no Python 3.11 interpreter on PATH")
    script = textwrap.dedent(
        """
        import asyncio, json
        from osmo_run import ExecutionRequest, ExecutionResult, RolloutSample, RolloutStatus
        from osmo_run.sdk.imports import resolve_class
        from osmo_run.sdk.rollout import run_grader_phase
        from osmo_run.sdk.config import GraderConfig

        def grade(path, settings, label, answer):
            grader = resolve_class(path, object, "grader")
            messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]
            request = ExecutionRequest("r", messages[:1], label=label)
            done = ExecutionResult("r", RolloutStatus.SUCCESS, sample=RolloutSample(messages))
            config = GraderConfig(settings=settings)
            result = asyncio.run(run_grader_phase(request, done, grader, config))
            assert result.ok, result.error_message
            return result.reward, result.info["grader"]["explanation"]

        parts = [{"grader": "NumericMatch"}, {"grader": "Includes"}]
        print(json.dumps([
            grade("osmo_run.graders:NumericMatch", {}, "1,234", "so \\u22121 then 1234"),
            grade("osmo_run.graders:ExactMatch", {"ignore_punctuation": True}, "Paris", "Paris."),
            grade("osmo_run.graders:JsonEquals", {}, '{"a": 1}', '```json\\n{"a": 1}\\n```'),
            grade("osmo_run.graders:AllOf", {"graders": parts}, "42", "It is 42"),
            grade("osmo_run.graders:TokenF1", {}, "the cat sat", "cat sat down"),
        ]))
        """
    )
    proc = subprocess.run(
        [python, "-S", "-c", script], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert proc.returncode == 0, proc.stderr
    rewards = [reward for reward, _ in json.loads(proc.stdout)]
    assert rewards == [1.0, 1.0, 1.0, 1.0, 0.8]
