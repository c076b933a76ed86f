"""Property: whatever a workflow produces, the output writer either writes a line that
reads back exactly, or the runner records a validation error; never a broken file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from osmo_run import ExecutionResult, RolloutSample, RolloutStatus
from osmo_run.run.writing.output import OutputWriter
from osmo_run.run.writing.records import OutputRecord, record_dict, record_line

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool"]), "content": json_values}
    ),
    max_size=4,
)
metrics = st.dictionaries(
    st.text(max_size=8), st.floats(allow_nan=False, allow_infinity=False), max_size=4
)


@settings(max_examples=150, deadline=None)
@given(
    row_id=st.text(min_size=1, max_size=20),
    msgs=messages,
    nums=metrics,
    info=st.dictionaries(st.text(max_size=8), json_values, max_size=3),
)
def test_any_json_result_round_trips_through_the_writer(
    tmp_path_factory: Any,
    row_id: str,
    msgs: list[dict[str, Any]],
    nums: dict[str, float],
    info: dict[str, Any],
) -> None:
    path: Path = tmp_path_factory.mktemp("out") / "out.jsonl"
    result = ExecutionResult(
        rollout_id=row_id,
        status=RolloutStatus.SUCCESS,
        sample=RolloutSample(messages=msgs, metrics=nums, reward=0.5),
        info=info,
    )
    record = record_dict(row_id, 0, 1, result)
    with OutputWriter(path) as writer:
        writer.write(record_line(record))
    raw = path.read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1 + raw[:-1].count(b"\n")
    back = json.loads(raw)
    if any("\ud800" <= ch <= "\udfff" for ch in json.dumps(record, ensure_ascii=False)):
        return  # lone surrogates come back as their JSON escapes (tested elsewhere)
    assert back == json.loads(json.dumps(record))
    OutputRecord.model_validate(back)
