"""Ids are data in Harbor trials too: rows whose ids hold slashes, ``..``, 300 characters or
markup run in real Docker trials, their ids kept exactly, their trial (Compose project and
container) names derived from safe names within Docker's limits."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from osmo_run.sdk.names import docker_part, safe_name
from tests.harbor.conftest import HarborRun, harbor_spec, run_harbor

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IDS = ["../../x", "gsm8k/train/17", "y" * 300, "[red]Q 1[/red]"]
ROWS: list[dict[str, Any]] = [{"id": i, "prompt": "hi", "label": "42"} for i in IDS]
ROWS.append({"id": "meta-only", "label": "42", "metadata": {"answer": "42"}})  # no prompt


@pytest.fixture(scope="module")
def odd_run(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> HarborRun:
    return run_harbor(tmp_path_factory.mktemp("odd-ids"), ROWS, harbor_spec(), "--keep-trials")


def test_odd_ids_run_in_trials_and_are_kept_exactly(odd_run: HarborRun) -> None:
    assert odd_run.returncode == 0, odd_run.stdout + odd_run.stderr
    assert sorted(odd_run.rows) == sorted([*IDS, "meta-only"])
    for row in odd_run.rows.values():
        assert (row["status"], row["reward"]) == ("success", 1.0), row["error_message"]
        assert row["safe_name"] == safe_name(row["row_id"])
    assert odd_run.leftovers == []


def test_trial_names_come_from_safe_names_within_dockers_limits(odd_run: HarborRun) -> None:
    trials = odd_run.out_dir / "trials"
    for row in odd_run.rows.values():
        name = row["backend"]["trial_name"]
        assert re.fullmatch(r"osmo-[0-9a-f]{8}-\d{5}-[a-z0-9][a-z0-9-]*", name), name
        assert len(name) <= 63  # a Compose project name, a container's hostname
        assert name.endswith(docker_part(row["safe_name"]))
        trial_dir = Path(row["backend"]["trial_dir"])
        assert trial_dir.parent == trials and (trial_dir / "result.json").is_file()
    assert len({row["backend"]["trial_name"] for row in odd_run.rows.values()}) == len(ROWS)
