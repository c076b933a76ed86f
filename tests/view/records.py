"""Results files written directly, in the output format (:class:`OutputRecord` checks each
one in ``test_index``), for the index and query tests that need many or odd lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def record(
    i: int,
    status: str = "success",
    category: str | None = None,
    phase: str | None = None,
    reward: float | None = 1.0,
    seconds: float = 0.01,
    text: str = "hello",
    tokens: tuple[int, int] | None = (10, 5),
    attempt: int = 1,
) -> dict[str, Any]:
    failed = status != "success"
    return {
        "schema_version": 1,
        "row_id": f"r{i:05d}",
        "rollout_id": f"r{i:05d}",
        "row_index": i,
        "sample_index": 0,
        "line": i + 1,
        "attempt": attempt,
        "attempts": [],
        "status": status,
        "reward": None if failed else reward,
        "error_category": category if failed else None,
        "error_message": f"{category}: went wrong in row {i}" if failed else None,
        "error_phase": phase if failed else None,
        "grader_skipped": None,
        "timings": {
            "queued_sec": 0.0,
            "setup_sec": None,
            "workflow_sec": seconds,
            "grader_sec": 0.0,
            "total_sec": seconds,
        },
        "sample": None
        if failed
        else {
            "messages": [
                {"role": "user", "content": f"question {i}"},
                {"role": "assistant", "content": text},
            ],
            "metrics": {},
        },
        "info": {},
        "backend": {},
        "usage": None
        if tokens is None
        else {
            "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1],
            "total_tokens": sum(tokens),
            "model_calls": 1,
            "model_sec": 0.01,
        },
    }


def line(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False) + "\n"


def write(path: Path, records: list[dict[str, Any]], extra: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line(r) for r in records) + extra, encoding="utf-8")
    return path


def mixed(n: int) -> list[dict[str, Any]]:
    """``n`` records: every 10th a timeout in the workflow, every 15th an agent error in the
    grader, rewards cycling 0, 0.25, 0.5, 0.75, 1 and durations growing with ``i``."""
    out = []
    for i in range(n):
        if i % 10 == 9:
            out.append(record(i, "failure", "timeout", "workflow", seconds=1 + i / 100))
        elif i % 15 == 14:
            out.append(record(i, "failure", "agent_error", "grader", seconds=0.5))
        else:
            out.append(record(i, reward=(i % 5) / 4, seconds=i / 1000, text=f"answer {i}"))
    return out
