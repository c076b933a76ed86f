"""Any bytes as a dataset (hypothesis): ``validate`` lists problems and a run's reading
refuses or records rows, but neither ends in an error that is not the input's (an
internal error, exit 3). Tokens are drawn from what breaks CSV and JSON readers: quotes,
separators, lone carriage returns, NUL, bytes that are not UTF-8, deep brackets."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from osmo_run.errors import OsmoRunError
from osmo_run.run.executing.validate import validate
from osmo_run.run.reading.dataset import Dataset

_TOKENS = st.sampled_from(
    [
        b'"',
        b",",
        b"\r",
        b"\n",
        b"\r\n",
        b"\x00",
        b"\xff",
        b"\xef\xbb\xbf",
        b"a",
        b"1",
        b" ",
        b"[" * 50,
        b"[" * 3000,
        b"id",
        b"prompt",
        b"messages",
        b"metadata",
        b'{"id": 1, "prompt": "p"}',
        b'{"prompt": "p"}',
        b'[{"role": "user", "content": "x"}]',
        b"\xed\xa0\x80",  # a lone surrogate, as UTF-8 would spell it
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TOKENS, min_size=0, max_size=30).map(b"".join), st.sampled_from(["csv", "jsonl"]))
def test_no_bytes_make_validate_or_reading_fail_other_than_as_bad_input(
    data: bytes, fmt: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"d.{fmt}"
        path.write_bytes(data)
        result = validate(None, path)  # never raises; problems or "ok"
        assert result.problems or result.checked
        for stop in (True, False):
            try:
                count, _ = Dataset(path).validate(stop_on_error=stop)
            except OsmoRunError:
                continue
            rows = list(Dataset(path).rows())
            assert len(rows) == count
