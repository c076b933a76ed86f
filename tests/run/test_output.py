"""The output file: private, flushed per line, secrets masked, and readable back."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from osmo_run import (
    BackendDetails,
    ErrorCategory,
    ExecutionResult,
    Phase,
    RolloutSample,
    RolloutStatus,
)
from osmo_run.errors import OutputError
from osmo_run.run.writing.output import OutputWriter
from osmo_run.run.writing.records import OutputRecord, record_dict, record_line


def test_output_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with OutputWriter(tmp_path / "deep" / "out.jsonl") as writer:
            writer.write("{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "deep" / "out.jsonl").stat().st_mode) == 0o600


def test_each_line_reaches_the_file_before_write_returns(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with OutputWriter(path) as writer:
        writer.write('{"n": 1}')
        assert path.read_text() == '{"n": 1}\n'
        writer.write('{"n": 2}')
        assert path.read_text().splitlines() == ['{"n": 1}', '{"n": 2}']
        assert writer.lines_written == 2


def test_secrets_are_replaced_by_stars_in_string_values(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    record = {"content": "my key is sk-live-123, again sk-live-123", "sk-live-123": [1, "x"]}
    with OutputWriter(path, secrets=("sk-live-123", "")) as writer:
        writer.write(record_line(writer.mask_record(record)))
    assert json.loads(path.read_text()) == {
        "content": "my key is ***, again ***",
        "sk-live-123": [1, "x"],  # a field name is never rewritten (it may be "row_id")
    }


def test_lone_surrogate_is_written_as_a_json_escape(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with OutputWriter(path) as writer:
        writer.write(record_line({"content": "half a pair: \ud800"}))
    raw = path.read_bytes()
    raw.decode("utf-8")  # the file stays valid UTF-8
    assert json.loads(raw) == {"content": "half a pair: \ud800"}


def test_unwritable_location_is_an_output_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError, match="cannot open the output file"):
        OutputWriter(blocker / "out.jsonl")


def test_records_round_trip_through_the_output_schema() -> None:
    success = ExecutionResult(
        rollout_id="a",
        status=RolloutStatus.SUCCESS,
        sample=RolloutSample([{"role": "assistant", "content": "x"}], {"turns": 2}, reward=0.5),
        info={"k": [1]},
        backend=BackendDetails.from_dict({"trial": "t1"}),
    )
    failure = ExecutionResult(
        rollout_id="b",
        status=RolloutStatus.FAILURE,
        error_category=ErrorCategory.TIMEOUT,
        error_message="late",
        error_phase=Phase.WORKFLOW,
    )
    first = OutputRecord.model_validate_json(record_line(record_dict("a", 0, 1, success)))
    assert (first.row_id, first.status, first.reward, first.backend) == (
        "a",
        "success",
        0.5,
        {"trial": "t1"},
    )
    assert first.sample is not None and first.sample.metrics == {"turns": 2}
    second = OutputRecord.model_validate_json(record_line(record_dict("b", 1, 3, failure)))
    assert (second.error_category, second.error_phase, second.sample) == (
        "timeout",
        "workflow",
        None,
    )
