"""A row's ``metadata.harbor_task`` is data: whatever it holds (NUL, 300 characters, a
lone surrogate, control characters, thousands of levels, a root it leaves), the row is a
``validation_error`` naming the field, never an ``internal_error``, and the other rows
run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.harbor.conftest import harbor_spec, run_harbor

BAD_NAMES = {
    "nul": "second\x00evil",
    "long": "t" * 300,
    "long-levels": "/".join(["a" * 200] * 30),
    "deep": "a/" * 3000,
    "surrogate": "second\ud800",
    "control": "sec\x1bond\n",
    "absolute": "/etc",
    "dot-dot": "../..",
}


@pytest.mark.docker
@pytest.mark.slow
def test_bad_harbor_task_names_are_validation_errors(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"id": key, "prompt": "hi", "label": "42", "metadata": {"harbor_task": name}}
        for key, name in BAD_NAMES.items()
    ]
    rows.append(
        {"id": "good", "prompt": "hi", "label": "42", "metadata": {"harbor_task": "second"}}
    )
    done = run_harbor(tmp_path, rows, harbor_spec())
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.rows["good"]["status"] == "success", done.rows["good"]["error_message"]
    for key in BAD_NAMES:
        row = done.rows[key]
        assert row["error_category"] == "validation_error", (key, row["error_message"])
        message = row["error_message"]
        assert "metadata.harbor_task" in message, message
        assert "\x00" not in message and "\x1b" not in message, message
        assert len(message) <= 1000
