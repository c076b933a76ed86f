"""A run spec and rows for ``osmo-run local`` runs against a stub model endpoint (the model
layer's tests: limits, budget)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import REPO

ENV = {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
"""The stub listens on 127.0.0.1: never through a proxy the machine may set."""
CHAT = "tests.llm.llm_workflows:EndpointWorkflow"
"""One model call a row."""
TURNS = "tests.llm.llm_workflows:TurnsWorkflow"
"""Three model calls a row."""


def write_spec(tmp_path: Path, concurrency: int, **fields: Any) -> Path:
    """``tmp_path/spec.yaml``: the one-call workflow from this repository at
    ``concurrency``, generous deadlines, and ``fields`` on top."""
    values: dict[str, Any] = {
        "workflow": CHAT,
        "code_dir": str(REPO),
        "concurrency": concurrency,
        "timeouts": {"agent_sec": 120, "grader_sec": 120},
        **fields,
    }
    spec = tmp_path / "spec.yaml"
    spec.write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in values.items()))
    return spec


def write_rows(tmp_path: Path, rows: int) -> Path:
    """``tmp_path/data.jsonl``: ``rows`` rows ``r0000``... asking ``hello``, labelled ``Hi.``
    (what the stubs answer)."""
    data = tmp_path / "data.jsonl"
    lines = (
        json.dumps({"id": f"r{i:04d}", "prompt": "hello", "label": "Hi."}) for i in range(rows)
    )
    data.write_text("\n".join(lines) + "\n")
    return data
