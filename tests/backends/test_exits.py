"""A workflow or grader that exits the process (``sys.exit``, ``os._exit``) fails its
own rollout's phase with ``agent_error`` and the run goes on, in one process and under
``--isolation process`` alike, with the words Harbor trials use (issue 28, item 12)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

OSMO_RUN = Path(sys.executable).parent / "osmo-run"
ROWS: list[dict[str, Any]] = [
    {"id": "wf-exit-3", "metadata": {"attack": "exit", "code": 3}},
    {"id": "gr-exit-0", "metadata": {"grader_action": "exit", "code": 0}},
    {"id": "wf-os-exit-0", "metadata": {"attack": "os_exit", "code": 0}},
    {"id": "gr-os-exit-4", "metadata": {"grader_action": "os_exit", "code": 4}},
    {"id": "fine", "metadata": {"answer": "42"}},
]
EXPECTED = {
    "wf-exit-3": ("workflow", 3),
    "gr-exit-0": ("grader", 0),
    "wf-os-exit-0": ("workflow", 0),
    "gr-os-exit-4": ("grader", 4),
}


def _run(tmp_path: Path, *flags: str, rows: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    dataset = tmp_path / "data.jsonl"
    lines = [json.dumps({**row, "prompt": "What is 6 * 7?", "label": "42"}) for row in rows]
    dataset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "out" / "results.jsonl"
    done = subprocess.run(
        [
            str(OSMO_RUN), "local", str(dataset),
            "--workflow", "hostile_workflows:HostileWorkflow",
            "--grader", "hostile_workflows:FairGrader",
            "--code-dir", str(REPO / "tests" / "harbor"),
            "-o", str(output), "--display", "plain", *flags,
        ],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    return done.returncode, {record["row_id"]: record for record in records}


@pytest.mark.parametrize("isolation", ["process", "none"])
def test_an_exit_is_agent_error_of_its_phase_and_the_run_goes_on(
    tmp_path: Path, isolation: str
) -> None:
    # in one process os._exit would end osmo-run itself: only sys.exit rows there
    rows = ROWS if isolation == "process" else [r for r in ROWS if "os_exit" not in str(r)]
    flags = ("--isolation", "process") if isolation == "process" else ()
    returncode, records = _run(tmp_path, *flags, rows=rows)
    assert returncode == 1
    assert set(records) == {row["id"] for row in rows}
    assert records["fine"]["reward"] == 1.0
    for row_id, record in records.items():
        if row_id == "fine":
            continue
        phase, code = EXPECTED[row_id]
        got = (record["status"], record["error_category"], record["error_phase"])
        assert got == ("failure", "agent_error", phase), record
        message = record["error_message"]
        assert message.startswith(f"the {phase} exited with code {code} without returning"), message
