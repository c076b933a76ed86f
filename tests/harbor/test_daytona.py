"""``osmo-run harbor --env daytona`` against a local fake of Daytona's API.

Daytona's cloud cannot be reached from here, so :mod:`tests.harbor.fake_daytona` stands
for it: an HTTP server on 127.0.0.1 that the real ``daytona`` SDK, driven by Harbor's real
Daytona environment, reaches through ``DAYTONA_API_URL``. The fake answers as the cloud
does when something is wrong (a rejected key, a rate limit, a server error, a slow API);
no sandbox is ever created, so these tests end where a trial would start running.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harbor.conftest import HarborRun, cli_env, harbor_spec, run_harbor
from tests.harbor.fake_daytona import (
    EMPTY_LIST,
    FORBIDDEN_KEY,
    QUOTA_EXCEEDED,
    RATE_LIMITED,
    REJECTED_KEY,
    SERVER_ERROR_PAGE,
    Answer,
    FakeDaytona,
    daytona_error,
    fake_daytona,
)

DAYTONA_MISSING = importlib.util.find_spec("daytona") is None


@pytest.fixture(autouse=True)
def _daytona_sdk() -> None:
    """Skip without the ``daytona`` extra; fail instead in CI (``OSMO_RUN_REQUIRE_DAYTONA=1``),
    where ``make`` installs it."""
    if not DAYTONA_MISSING:
        return
    problem = "the daytona extra is not installed (make installs it)"
    if os.environ.get("OSMO_RUN_REQUIRE_DAYTONA") == "1":
        pytest.fail(f"OSMO_RUN_REQUIRE_DAYTONA=1 but {problem}", pytrace=False)
    pytest.skip(problem)


KEY = "dtn_fake_key_0123456789abcdef"
ROWS = [{"id": f"r{i}", "prompt": "hi", "label": "42"} for i in range(1, 4)]
NO_RETRIES = {"retries": {"max_attempts": 1}}


def run_daytona(tmp_path: Path, fake: FakeDaytona, *args: str, **spec: Any) -> HarborRun:
    spec = harbor_spec(**{**NO_RETRIES, **spec})
    env = cli_env(**fake.env(KEY))
    return run_harbor(tmp_path, ROWS, spec, "--env", "daytona", *args, env=env)


def assert_refused_before_any_row(run: HarborRun, fake: FakeDaytona) -> str:
    """Exit 2, one ``error:`` line naming the fake's URL, no traceback, no row, no key in
    the output, and exactly one API call (the probe) with no sandbox asked for."""
    assert run.returncode == 2, run.stdout + run.stderr
    assert len(run.error_lines) == 1, run.stderr
    [line] = run.error_lines
    assert line.startswith(f"error: --env daytona: Daytona's API at {fake.url} "), line
    assert "Traceback" not in run.stdout + run.stderr
    assert KEY not in run.stdout + run.stderr
    assert run.rows == {}
    assert not run.output.exists()
    assert fake.calls("GET") == 1
    assert fake.calls("POST") == 0
    return line


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (REJECTED_KEY, "answered 401 Unauthorized: Invalid API key"),
        (FORBIDDEN_KEY, "answered 403 Forbidden: Forbidden resource: missing write:sandboxes"),
    ],
)
def test_a_rejected_key_stops_the_run_before_any_row_with_one_line(
    tmp_path: Path, answer: Answer, said: str
) -> None:
    with fake_daytona() as fake:
        fake.answer_everything(answer)
        run = run_daytona(tmp_path, fake)
    line = assert_refused_before_any_row(run, fake)
    assert line.endswith(
        f"rejected the credentials ({said}); check DAYTONA_API_KEY "
        "(or DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID)"
    ), line
    # the real SDK sent the key it was given with its probe (the one request of the run that
    # counts; whatever else the SDK sends of its own, and in which order, is not the point)
    probes = [auth for method, path, auth in fake.requests if (method, path) == ("GET", "/sandbox")]
    assert probes == [f"Bearer {KEY}"], fake.requests


def test_a_refusal_quoting_the_key_shows_stars_in_the_one_line(tmp_path: Path) -> None:
    """An API that quotes the key it refused (``invalid api key <KEY>``) has its answer
    printed with ``***`` in place of the key: the line is on the terminal and in CI logs."""
    with fake_daytona() as fake:
        fake.answer_everything(daytona_error(401, f"invalid api key {KEY}", "Unauthorized"))
        run = run_daytona(tmp_path, fake)
    line = assert_refused_before_any_row(run, fake)  # asserts KEY is in no output
    assert line.endswith(
        "rejected the credentials (answered 401 Unauthorized: invalid api key ***); "
        "check DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID)"
    ), line


def test_a_rate_limit_stops_the_run_before_any_row_with_one_line(tmp_path: Path) -> None:
    with fake_daytona() as fake:
        fake.answer_everything(RATE_LIMITED)
        run = run_daytona(tmp_path, fake)
    line = assert_refused_before_any_row(run, fake)
    assert "answered 429 Too Many Requests: ThrottlerException: Too Many Requests" in line
    assert "(rate limit or quota); wait for it to reset, or lower --concurrency" in line


def test_a_server_error_page_is_one_line_with_the_page_title(tmp_path: Path) -> None:
    with fake_daytona() as fake:
        fake.answer_everything(SERVER_ERROR_PAGE)
        run = run_daytona(tmp_path, fake)
    line = assert_refused_before_any_row(run, fake)
    assert line.endswith(
        "answered 502 Bad Gateway: 502 Bad Gateway; the service is failing, try again later"
    ), line
    assert "<" not in line


def test_an_api_slower_than_the_preflight_timeout_stops_the_run_in_that_time(
    tmp_path: Path,
) -> None:
    slow_sec = 60.0  # far beyond the 1 s timeout: waiting for it cannot pass for start-up
    with fake_daytona() as fake:
        fake.answers["GET /sandbox"] = Answer(200, EMPTY_LIST.body, delay_sec=slow_sec)
        started = time.monotonic()
        run = run_daytona(tmp_path, fake, "--preflight-timeout", "1")
        waited = time.monotonic() - started
    line = assert_refused_before_any_row(run, fake)
    assert line.endswith(
        "did not answer within 1s; check DAYTONA_API_URL and the network "
        "(harbor.preflight_timeout_sec waits longer)"
    ), line
    # The run did not wait for the slow answer. Bounded by the answer's delay, not by a
    # guess at how fast the CLI starts: on a busy 2-core box its start alone takes seconds.
    assert waited < slow_sec, waited


def test_an_unreachable_api_stops_the_run_with_one_line(tmp_path: Path) -> None:
    with fake_daytona() as fake:
        url = fake.url
    env = cli_env(DAYTONA_API_URL=url, DAYTONA_API_KEY=KEY)  # nothing listens there now
    run = run_harbor(tmp_path, ROWS, harbor_spec(), "--env", "daytona", env=env)
    assert run.returncode == 2, run.stdout + run.stderr
    [line] = run.error_lines
    assert line.startswith(f"error: --env daytona: Daytona's API at {url} failed: "), line
    assert line.endswith("check DAYTONA_API_URL and the network"), line
    assert run.rows == {}


def test_server_errors_after_a_good_probe_fail_each_row_with_a_short_message(
    tmp_path: Path,
) -> None:
    """The key is good (the probe lists sandboxes) but creating one answers an HTML page:
    Harbor's Daytona environment fails each trial in setup. Rows say ``infra_error`` with
    the page's title; the page itself is in the trial directory, which the row names."""
    with fake_daytona() as fake:
        fake.answers["POST /sandbox"] = SERVER_ERROR_PAGE
        run = run_daytona(tmp_path, fake)
    assert run.returncode == 1, run.stdout + run.stderr
    assert set(run.rows) == {row["id"] for row in ROWS}
    expected = (
        "the trial environment failed before the workflow ran: DaytonaBadGatewayError: "
        "Failed to create sandbox: 502 Bad Gateway"
    )
    for row_id, row in run.rows.items():
        assert (row["error_category"], row["error_phase"]) == ("infra_error", "setup")
        assert row["error_message"] == expected
        full = Path(row["backend"]["error_log"])
        assert full.parent == Path(row["backend"]["trial_dir"])
        assert "<title>502 Bad Gateway</title>" in full.read_text(encoding="utf-8")
        assert f"FAILURE row {row_id} [infra_error, setup]: {expected} (full text: {full})" in (
            run.stdout
        )
    assert "<html" not in run.stdout + run.stderr
    assert fake.calls("POST") >= len(ROWS)  # every trial really asked for a sandbox


def test_a_slow_api_within_the_timeout_runs_and_a_quota_error_is_short(tmp_path: Path) -> None:
    """A slow listing (1.5 s) passes a 10 s preflight; an exhausted quota answered when a
    sandbox is created fails the rows with Daytona's own sentence."""
    with fake_daytona() as fake:
        fake.answers["GET /sandbox"] = Answer(200, EMPTY_LIST.body, delay_sec=1.5)
        fake.answers["POST /sandbox"] = QUOTA_EXCEEDED
        run = run_daytona(tmp_path, fake, "--preflight-timeout", "10")
    assert run.returncode == 1, run.stdout + run.stderr
    messages = {row["error_message"] for row in run.rows.values()}
    assert messages == {
        "the trial environment failed before the workflow ran: DaytonaForbiddenError: "
        "Failed to create sandbox: Total CPU quota exceeded. Maximum allowed: 10"
    }
    assert run.summary["error_categories"] == {"infra_error": len(ROWS)}


def test_a_provider_error_quoting_the_key_is_masked_in_rows_lines_and_files(
    tmp_path: Path,
) -> None:
    """Daytona's credentials are secrets of the run like a model's API key: an error that
    quotes the key shows ``***`` in the row, the printed line, the full-text file and the
    files Harbor wrote in the kept trial directory."""
    with fake_daytona() as fake:
        fake.answers["POST /sandbox"] = Answer(
            500, f"<html><head><title>key {KEY} over quota</title></head></html>", "text/html"
        )
        run = run_daytona(tmp_path, fake)
    assert run.returncode == 1, run.stdout + run.stderr
    for row in run.rows.values():
        assert row["error_message"].endswith("Failed to create sandbox: key *** over quota")
        full = Path(row["backend"]["error_log"]).read_text(encoding="utf-8")
        assert KEY not in full and "key *** over quota" in full
        kept = [p for p in Path(row["backend"]["trial_dir"]).rglob("*") if p.is_file()]
        assert kept  # Harbor's own trial.log, exception.txt, result.json: masked too
        assert [p.name for p in kept if KEY.encode() in p.read_bytes()] == []
    assert KEY not in run.output.read_text(encoding="utf-8")
    assert KEY not in run.stdout + run.stderr


def test_a_quota_answered_per_sandbox_trips_the_breaker_with_the_short_cause(
    tmp_path: Path,
) -> None:
    """What one preflight call cannot tell (the quota runs out when sandboxes are created)
    fails rows with one cause; the breaker (K = 2 here) stops the run after two of them
    with that cause in one short line, and the rest are not started."""
    rows = [{"id": f"q{i}", "prompt": "hi", "label": "42"} for i in range(1, 9)]
    with fake_daytona() as fake:
        fake.answers["POST /sandbox"] = QUOTA_EXCEEDED
        spec = harbor_spec(**NO_RETRIES, concurrency=1)
        env = cli_env(**fake.env(KEY))
        run = run_harbor(tmp_path, rows, spec, "--env", "daytona", "--breaker", "2", env=env)
    assert run.returncode == 5, run.stdout + run.stderr
    assert len(run.rows) == 2
    output = (run.stdout + run.stderr).splitlines()
    [stopped] = [line for line in output if line.startswith("stopped by the breaker")]
    assert "2 rollouts in a row failed with infra_error" in stopped, stopped
    assert "Total CPU quota exceeded. Maximum allowed: 10" in stopped, stopped
    assert "6 rows not started" in stopped, stopped
