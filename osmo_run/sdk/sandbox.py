"""Run one phase of one rollout inside a sandbox: read an input JSON, write a result JSON.

    python3 -m osmo_run.sdk.sandbox workflow INPUT.json RESULT.json
    python3 -m osmo_run.sdk.sandbox grader INPUT.json RESULT.json

Used by the Harbor backend inside trial environments, where only this SDK (stdlib only,
Python >= 3.11) and the user's code are present. Results travel as files that Harbor
collects, never through stdout. The model API key arrives in ``OSMO_RUN_LLM_API_KEY``, the
judge's in ``OSMO_RUN_JUDGE_API_KEY``; neither is ever written to a file. Every failure of
the workflow or grader, import errors included, becomes a result file with a category; the
exit code is 0 whenever a result was written.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from osmo_run.sdk.config import AgentWorkflowConfig, GraderConfig
from osmo_run.sdk.context import LLMEndpoint, artifacts_root_from_env
from osmo_run.sdk.imports import ensure_on_path, resolve_class
from osmo_run.sdk.rollout import run_grader_phase, run_to_completion, run_workflow_phase
from osmo_run.sdk.types import (
    ErrorCategory,
    ExecutionRequest,
    ExecutionResult,
    Phase,
    describe_exception,
)
from osmo_run.sdk.workflow import AgentWorkflow, Grader

API_KEY_ENV = "OSMO_RUN_LLM_API_KEY"
JUDGE_API_KEY_ENV = "OSMO_RUN_JUDGE_API_KEY"
CODE_DIR_ENV = "OSMO_RUN_CODE_DIR"
STARTED_FD_ENV = "OSMO_RUN_STARTED_FD"
"""A file descriptor the runner writes one byte to when its phase starts (process isolation)."""
SUPERVISED_ENV = "OSMO_RUN_PHASE_SUPERVISED"
"""Set (``1``) for a phase whose process its parent kills at the deadline (process
isolation): the built-in graders' unbounded work runs in that process, which is already
killable, instead of in grader worker processes of its own (:mod:`osmo_run.graders.workers`)."""


def workflow_input(
    request: ExecutionRequest,
    workflow: str,
    config: AgentWorkflowConfig,
    llm: LLMEndpoint | None,
    base_url: str | None = None,
) -> dict[str, Any]:
    """The runner's input for a workflow phase. No label (the workflow must not see it) and
    no API key (it travels in the environment); ``base_url`` overrides ``llm.base_url``
    where the runner reaches the endpoint by another address."""
    return {
        "request": {
            "id": request.id,
            "name": request.safe_name,
            "prompt": request.prompt,
            "metadata": request.metadata,
            "agent_timeout_sec": request.agent_timeout_sec,
        },
        "workflow": workflow,
        "workflow_config": {
            "concurrency": {"max_concurrent": config.concurrency.max_concurrent},
            "settings": config.settings,
        },
        "llm": _endpoint_input(llm, base_url),
    }


def grader_input(
    request: ExecutionRequest,
    grader: str,
    config: GraderConfig,
    judge: LLMEndpoint | None = None,
    judge_url: str | None = None,
) -> dict[str, Any]:
    """The runner's input for a grader phase, without the workflow's result (added when
    the workflow has finished, as ``workflow_result``). ``judge`` is the judge endpoint
    without its key (it travels in the environment); ``judge_url`` overrides its base URL
    where the runner reaches it by another address."""
    return {
        "request": {
            "id": request.id,
            "name": request.safe_name,
            "prompt": request.prompt,
            "label": request.label,
            "metadata": request.metadata,
            "grader_timeout_sec": request.grader_timeout_sec,
        },
        "grader": grader,
        "grader_config": {"settings": config.settings},
        "judge": _endpoint_input(judge, judge_url),
    }


def _endpoint_input(endpoint: LLMEndpoint | None, base_url: str | None) -> dict[str, Any] | None:
    if endpoint is None:
        return None
    data: dict[str, Any] = {"base_url": base_url or endpoint.base_url, "model": endpoint.model}
    if endpoint.capture_tokens:
        data["capture_tokens"] = True
    return data


def _endpoint(data: dict[str, Any] | None, key_env: str) -> LLMEndpoint | None:
    """The endpoint :func:`_endpoint_input` wrote, with its key from ``key_env``."""
    if not data:
        return None
    key = os.environ.get(key_env) or None
    capture = data.get("capture_tokens") is True
    return LLMEndpoint(data["base_url"], data["model"], api_key=key, capture_tokens=capture)


def _request(data: dict[str, Any]) -> ExecutionRequest:
    return ExecutionRequest(
        id=str(data["id"]),
        prompt=list(data["prompt"]),
        label=data.get("label"),
        metadata=dict(data.get("metadata") or {}),
        agent_timeout_sec=data.get("agent_timeout_sec"),
        grader_timeout_sec=data.get("grader_timeout_sec"),
        name=data.get("name"),
    )


def _load_failure(request_id: str, phase: Phase, exc: BaseException, what: str) -> ExecutionResult:
    message = (
        f"the {what} could not be loaded inside the trial environment: "
        f"{describe_exception(exc)}; make sure its code and dependencies are in the image"
    )
    return ExecutionResult.failure(request_id, ErrorCategory.AGENT_ERROR, message, phase)


async def _run_workflow(spec: dict[str, Any]) -> ExecutionResult:
    request = _request(spec["request"])
    try:
        workflow = resolve_class(spec["workflow"], AgentWorkflow, "workflow")
        config = AgentWorkflowConfig.from_dict(spec.get("workflow_config"))
    except Exception as exc:
        return _load_failure(request.id, Phase.SETUP, exc, "workflow")
    llm = _endpoint(spec.get("llm"), API_KEY_ENV)
    _say_started()
    return await run_workflow_phase(request, workflow, config, llm, artifacts_root_from_env())


async def _run_grader(spec: dict[str, Any]) -> ExecutionResult:
    request = _request(spec["request"])
    try:
        grader = resolve_class(spec["grader"], Grader, "grader")
        config = GraderConfig.from_dict(spec.get("grader_config"))
    except Exception as exc:
        return _load_failure(request.id, Phase.GRADER, exc, "grader")
    workflow_result = ExecutionResult.from_dict(spec["workflow_result"])
    judge = _endpoint(spec.get("judge"), JUDGE_API_KEY_ENV)
    _say_started()
    return await run_grader_phase(
        request, workflow_result, grader, config, artifacts_root_from_env(), judge
    )


def _say_started() -> None:
    """Tell the parent (``--isolation process``) that the phase starts now: its code is
    loaded, and the deadline counts from here. Nothing to do in a Harbor trial."""
    fd = os.environ.pop(STARTED_FD_ENV, None)
    if not fd:
        return
    try:
        os.write(int(fd), b"1")
        os.close(int(fd))
    except (OSError, ValueError):
        pass  # the parent then counts from the end of its start-up limit; never fatal


def main(argv: list[str]) -> int:
    """Entry point; returns the process exit code (2 for a bad invocation)."""
    if len(argv) != 3 or argv[0] not in {"workflow", "grader"}:
        print(
            "usage: python3 -m osmo_run.sdk.sandbox workflow|grader INPUT RESULT", file=sys.stderr
        )
        return 2
    phase, input_path, result_path = argv[0], Path(argv[1]), Path(argv[2])
    spec = json.loads(input_path.read_text(encoding="utf-8"))
    ensure_on_path(Path(os.environ.get(CODE_DIR_ENV) or spec.get("code_dir") or "."))
    started = time.monotonic()
    run = _run_workflow if phase == "workflow" else _run_grader
    result = run_to_completion(run(spec))
    result.timings.total_sec = time.monotonic() - started
    tmp = result_path.with_name(result_path.name + ".tmp")
    out = result.to_dict()
    if result.turns is not None:  # captured calls (llm.capture: tokens), read back by the host
        out["turns"] = result.turns
    tmp.write_text(json.dumps(out, ensure_ascii=False, default=repr), encoding="utf-8")
    tmp.replace(result_path)  # atomic: the host never reads half a result
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # do not wait for an abandoned workflow's threads: the result is written
