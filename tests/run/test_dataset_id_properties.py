"""Rules of row ids over generated datasets (hypothesis): a dataset either is refused for a
duplicate id, or every row it yields (recorded bad rows included) has an id and a safe name
no other row has; and every shard refuses exactly what the whole run refuses."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from osmo_run.errors import DatasetError
from osmo_run.run.reading.dataset import Dataset
from osmo_run.sdk.names import safe_name

_IDS = st.one_of(
    st.integers(min_value=0, max_value=12),
    st.sampled_from(["1", "2", "line-2", "line-3", "line-3-2", "LINE-3", "q", "Q", "x/y"]),
)
_LINES = st.one_of(
    _IDS.map(lambda i: json.dumps({"id": i, "prompt": "p"})),  # a good row with an id
    st.just(json.dumps({"prompt": "p"})),  # a good row named by its line
    _IDS.map(lambda i: json.dumps({"id": i, "prompt": 5})),  # bad, with a valid id
    st.just(json.dumps({"id": None, "prompt": "p"})),  # bad, named by its line
    st.just("{not json"),  # bad, named by its line
    st.just("[1]"),  # bad, named by its line
)


def _outcome(path: Path, shard: tuple[int, int] | None = None) -> list[str] | None:
    """The ids of the rows the (sharded) run yields, ``None`` when it is refused."""
    dataset = Dataset(path, shard=shard)
    try:
        dataset.validate(stop_on_error=False)
    except DatasetError as exc:
        assert "duplicate id" in str(exc) or "same file name" in str(exc), exc
        return None
    return [row.row_id for row in dataset.rows()]


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINES, min_size=1, max_size=9), st.integers(min_value=2, max_value=3))
def test_ids_are_unique_or_the_dataset_is_refused_in_every_shard(
    lines: list[str], shards: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "d.jsonl"
        path.write_text("\n".join(lines) + "\n")
        whole = _outcome(path)
        if whole is not None:
            assert len(set(whole)) == len(whole), whole
            names = [safe_name(row_id) for row_id in whole]
            assert len(set(names)) == len(names), names
        for k in range(1, shards + 1):
            part = _outcome(path, (k, shards))
            assert (part is None) == (whole is None), (k, shards, whole, part)
            if part is not None and whole is not None:
                assert set(part) <= set(whole), "a shard names its rows as the whole run does"
