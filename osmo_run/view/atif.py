"""Each rollout of a run as an ATIF trajectory (Harbor's Agent Trajectory Interchange
Format), built with Harbor's own models (``harbor.models.trajectories``) so Harbor's tools
read osmo-run rollouts.

Written as ``DIR/<safe name>/agent/trajectory.json`` (the rollout's ``safe_name``, the name
of its artifacts directory: see :mod:`osmo_run.sdk.names`; the id itself is in the
trajectory's ``trajectory_id``): the layout of a Harbor trial's agent
logs, which Harbor's trace tools look for. Chat messages map to steps: ``system`` and
``user`` to steps of that source, ``assistant`` to ``agent`` steps with their tool calls,
and ``tool`` messages to the observation of the agent step whose call they answer. The
rollout's status, reward and error go to the trajectory's ``extra.osmo_run``; its usage
to ``final_metrics``. A rollout without a sample (it failed before its workflow returned
messages) has no trajectory to write and is counted as skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmo_run import __version__
from osmo_run.errors import BackendUnavailable, OutputError
from osmo_run.run.writing.records import record_safe_name
from osmo_run.view.catalog import RunEntry
from osmo_run.view.index import cache_dir
from osmo_run.view.pages import RunView


@dataclass
class AtifWritten:
    written: int
    skipped: int

    @property
    def note(self) -> str:
        if not self.skipped:
            return ""
        return (
            f" ({self.skipped} rollouts without a sample skipped: they failed before any message)"
        )


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, str):
                parts.append(item)
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                parts.append(item["text"])
            else:
                parts.append(json.dumps(item, ensure_ascii=False))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {"raw": raw}
    return raw if isinstance(raw, dict) else {"value": raw}


_RECORD_FIELDS = (
    "row_id",
    "rollout_id",
    "sample_index",
    "status",
    "reward",
    "error_category",
    "error_phase",
    "error_message",
    "attempt",
    "timings",
    "usage",
)


def _tool_calls(message: dict[str, Any], step_number: int) -> list[Any]:
    from harbor.models.trajectories import ToolCall

    tool_calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        inner = call.get("function")
        function: dict[str, Any] = inner if isinstance(inner, dict) else {}
        tool_calls.append(
            ToolCall(
                tool_call_id=str(call.get("id") or f"call-{step_number}-{i}"),
                function_name=str(function.get("name") or "?"),
                arguments=_arguments(function.get("arguments")),
            )
        )
    return tool_calls


def _steps(messages: list[Any]) -> list[Any]:
    """The conversation as ATIF steps: a tool result becomes an observation of the agent
    step whose call it answers (or of a system step when no call matches)."""
    from harbor.models.trajectories import Observation, ObservationResult, Step

    steps: list[Any] = []
    calls: dict[str, Any] = {}  # tool call id -> the agent step that made it
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        text = _text(message.get("content"))
        if role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            owner = calls.get(call_id)
            result = ObservationResult(source_call_id=call_id if owner else None, content=text)
            if owner is None:
                owner = Step(step_id=len(steps) + 1, source="system", message="")
                steps.append(owner)
            if owner.observation is None:
                owner.observation = Observation(results=[])
            owner.observation.results.append(result)
        elif role == "assistant":
            tool_calls = _tool_calls(message, len(steps))
            reasoning = message.get("reasoning_content")
            step = Step(
                step_id=len(steps) + 1,
                source="agent",
                message=text,
                tool_calls=tool_calls or None,
                reasoning_content=reasoning if isinstance(reasoning, str) else None,
            )
            calls.update((call.tool_call_id, step) for call in tool_calls)
            steps.append(step)
        else:
            source = "system" if role == "system" else "user"
            steps.append(Step(step_id=len(steps) + 1, source=source, message=text))
    return steps or [Step(step_id=1, source="system", message="")]


def trajectory(record: dict[str, Any], run_id: str, model: str | None, workflow: str) -> Any:
    """The :class:`harbor.models.trajectories.Trajectory` of one record with a sample."""
    from harbor.models.trajectories import Agent, FinalMetrics, Trajectory

    steps = _steps(record["sample"]["messages"])
    usage = record.get("usage") if isinstance(record.get("usage"), dict) else None
    return Trajectory(
        session_id=run_id,
        trajectory_id=str(record.get("rollout_id") or record.get("row_id")),
        agent=Agent(
            name="osmo-run", version=__version__, model_name=model, extra={"workflow": workflow}
        ),
        steps=steps,
        final_metrics=FinalMetrics(
            total_prompt_tokens=usage.get("prompt_tokens") if usage else None,
            total_completion_tokens=usage.get("completion_tokens") if usage else None,
            total_steps=len(steps),
        ),
        extra={
            "osmo_run": {key: record.get(key) for key in _RECORD_FIELDS}
            | {"metrics": record["sample"].get("metrics") or {}}
        },
    )


def export_atif(entry: RunEntry, target: Path) -> AtifWritten:
    """Write every rollout of ``entry`` with a sample under ``target``. Raises
    :class:`BackendUnavailable` without Harbor, :class:`OutputError` when it cannot write."""
    try:
        from harbor.models.trajectories import Trajectory  # noqa: F401
        from harbor.utils.trajectory_utils import format_trajectory_json
    except ImportError:
        raise BackendUnavailable(
            "--export-atif writes with Harbor's trajectory models: pip install 'osmo-run[harbor]'"
        ) from None
    manifest = entry.manifest
    model = manifest.defining.get("model") if manifest else None
    workflow = str(manifest.defining.get("workflow") if manifest else "?")
    view = RunView(entry, cache_dir())
    written = skipped = 0
    with view.lock:
        view.refresh()
        for _, record in view.index.read_many(list(range(view.index.count))):
            sample = record.get("sample")
            if not isinstance(sample, dict) or not isinstance(sample.get("messages"), list):
                skipped += 1
                continue
            item = trajectory(record, entry.name, model, workflow)
            # ids are data (``../x``, ``a/b``, 300 characters, a NUL): the folder is the
            # rollout's safe name, as its artifacts directory is
            folder = target / record_safe_name(record)
            try:
                (folder / "agent").mkdir(parents=True, exist_ok=True)
                (folder / "agent" / "trajectory.json").write_text(
                    format_trajectory_json(item.to_json_dict()), encoding="utf-8"
                )
            except OSError as exc:
                raise OutputError(f"{folder}: cannot write: {exc.strerror or exc}") from None
            written += 1
    return AtifWritten(written, skipped)
