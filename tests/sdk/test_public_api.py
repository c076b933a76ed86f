"""The SDK's public surface: what ``from osmo_run import ...`` offers, and what it costs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import osmo_run
import osmo_run.sdk
from tests.conftest import REPO

CLI_ONLY = ("typer", "rich", "pydantic", "anyio", "yaml", "harbor")


def test_root_exports_exactly_the_sdk() -> None:
    assert osmo_run.__all__ == osmo_run.sdk.__all__


def test_public_names_are_sorted_and_importable() -> None:
    assert osmo_run.__all__ == sorted(osmo_run.__all__)
    for name in osmo_run.__all__:
        assert getattr(osmo_run, name) is getattr(osmo_run.sdk, name), name
    namespace: dict[str, object] = {}
    exec("from osmo_run import *", namespace)
    assert set(osmo_run.__all__) <= set(namespace)


@pytest.mark.parametrize(
    "module", ["osmo_run", "osmo_run.sdk", "osmo_run.sdk.rollout", "osmo_run.sdk.llm"]
)
def test_importing_the_sdk_loads_no_cli_dependency(module: str) -> None:
    """The venv has all of them installed; importing the SDK must still load none."""
    code = f"import sys, {module}; print(__import__('json').dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    loaded = {name.split(".")[0] for name in json.loads(out)}
    assert not loaded & set(CLI_ONLY)


def _python311() -> str | None:
    for name in ("python3.11", "python3"):
        path = shutil.which(name)
        if path is None:
            continue
        version = subprocess.run(
            [path, "-c", "import sys; print(sys.version_info[:2] == (3, 11))"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if version == "True":
            return path
    return None


def test_sdk_runs_a_workflow_on_python_311_with_the_stdlib_only() -> None:
    """``-S`` leaves out every site-packages directory: only the stdlib and the repo."""
    python = _python311()
    if python is None:
        pytest.skip("no Python 3.11 interpreter on PATH")
    script = textwrap.dedent(
        """
        import asyncio, sys
        from osmo_run import AgentWorkflow, AgentWorkflowConfig, ExecutionRequest
        from osmo_run.sdk.rollout import run_workflow_phase

        class Hello(AgentWorkflow):
            async def run(self, ctx):
                name = ctx.prompt[-1]["content"]
                return [*ctx.prompt, {"role": "assistant", "content": "hello " + name}]

        request = ExecutionRequest(
            id="r1", prompt=[{"role": "user", "content": "there"}], agent_timeout_sec=5
        )
        result = asyncio.run(run_workflow_phase(request, Hello, AgentWorkflowConfig()))
        print(sys.version_info[:2], result.status.value, result.sample.messages[-1]["content"])
        """
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [python, "-S", "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(3, 11) success hello there"
