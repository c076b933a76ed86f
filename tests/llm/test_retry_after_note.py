"""The give-up note the run-level retry reads: only the one osmo-run writes after the HTTP
status, never what the endpoint's own text says."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from osmo_run.sdk.model_retry import asked_wait_sec


@given(seconds=st.floats(min_value=0, max_value=1e12, allow_nan=False), body=st.text())
def test_the_note_is_read_and_the_endpoints_text_is_not(seconds: float, body: str) -> None:
    note = f"Retry-After {seconds:g}s is longer than the 30s a call waits; gave up after 1 tries"
    message = f"RateLimitError: http://h/v1 answered HTTP 429 ({note}): {body}"
    asked = asked_wait_sec(message)
    assert asked is not None and abs(asked - float(f"{seconds:g}")) <= 1e-9 * max(seconds, 1)
    assert asked_wait_sec(f"answered HTTP 429: (Retry-After 99999s) {body}") is None
