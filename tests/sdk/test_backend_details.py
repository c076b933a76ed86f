"""What backends add to a result is typed (``ExecutionResult.backend``, a
:class:`BackendDetails`), while the output record's ``backend`` object keeps its JSON shape:
results files written before read back, and read-then-written records stay the same."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from pathlib import Path

from osmo_run import BackendDetails, ErrorCategory, ExecutionResult, Phase
from osmo_run.run.writing.full_errors import TRIAL_ERROR_FILE, keep_full_error
from osmo_run.run.writing.records import record_dict

HARBOR_RECORD = {
    "rollout_id": "r1",
    "status": "failure",
    "error_category": "agent_error",
    "error_message": "boom",
    "error_phase": "workflow",
    "backend": {
        "trial_name": "osmo-ab12cd34-00001-r1",
        "trial_id": "5f0e",
        "environment": "docker",
        "trial_dir": "/runs/x/trials/osmo-ab12cd34-00001-r1",
        "error_log": "/runs/x/trials/osmo-ab12cd34-00001-r1/osmo-run-error.txt",
    },
}
"""A failed Harbor row as osmo-run has always written it."""


def test_a_harbor_record_reads_as_typed_details_and_writes_back_the_same() -> None:
    result = ExecutionResult.from_dict(json.loads(json.dumps(HARBOR_RECORD)))
    details = result.backend
    assert (details.trial_name, details.trial_id, details.environment) == (
        "osmo-ab12cd34-00001-r1",
        "5f0e",
        "docker",
    )
    assert details.trial_dir == "/runs/x/trials/osmo-ab12cd34-00001-r1"
    assert details.error_log is not None and details.error_log.endswith(TRIAL_ERROR_FILE)
    assert result.to_dict()["backend"] == HARBOR_RECORD["backend"]
    assert list(record_dict("r1", 0, 1, result)["backend"]) == list(HARBOR_RECORD["backend"])


def test_keys_this_version_does_not_know_survive_a_round_trip() -> None:
    odd = {"trial_dir": 7, "sandbox": {"id": "s-1"}, "environment": "daytona"}
    result = ExecutionResult.from_dict({**HARBOR_RECORD, "backend": odd})
    assert result.backend.trial_dir is None  # not a path: never used as one
    assert result.backend.environment == "daytona"
    assert result.to_dict()["backend"] == odd
    for copied in (copy.deepcopy(result), pickle.loads(pickle.dumps(result))):
        assert copied.backend == result.backend
    for missing in (None, [], "text"):  # a hand-edited record reads as no details
        read = ExecutionResult.from_dict({**HARBOR_RECORD, "backend": missing})
        assert read.backend == BackendDetails() and read.to_dict()["backend"] == {}


def test_a_local_row_writes_an_empty_backend_object() -> None:
    result = ExecutionResult.failure("r1", ErrorCategory.AGENT_ERROR, "boom", Phase.WORKFLOW)
    assert result.to_dict()["backend"] == {} and result.extra == {}


def test_the_full_error_file_goes_into_the_kept_trial_directory(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    trial.mkdir()
    result = ExecutionResult.failure(
        "r1", ErrorCategory.INFRA_ERROR, "first line\nand the rest of a long error", Phase.SETUP
    )
    result.backend = dataclasses.replace(result.backend, trial_dir=str(trial))
    keep_full_error(result, tmp_path / "errors", "r1", lambda text: text)
    assert result.backend.error_log == str(trial / TRIAL_ERROR_FILE)
    assert (trial / TRIAL_ERROR_FILE).read_text().startswith("first line")
    written = record_dict("r1", 0, 1, result)["backend"]
    assert written == {"trial_dir": str(trial), "error_log": str(trial / TRIAL_ERROR_FILE)}
    other = ExecutionResult.failure("r2", ErrorCategory.INFRA_ERROR, "a\nb", Phase.SETUP)
    keep_full_error(other, tmp_path / "errors", "r2", lambda text: text)
    assert other.backend.error_log == str(tmp_path / "errors" / "r2.txt")
    assert result.backend is not other.backend  # the shared empty details stay empty
    assert ExecutionResult("r3", result.status).backend == BackendDetails()
