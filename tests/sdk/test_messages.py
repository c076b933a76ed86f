"""Error messages are the first meaningful line of what went wrong: an HTML page becomes
its title, Harbor's compose failure its first sentence and the error line of its output, a
traceback its last line; a one-line message is kept as it is."""

from __future__ import annotations

from osmo_run import ErrorCategory, ExecutionResult
from osmo_run.sdk.messages import MAX_MESSAGE_CHARS, short_message
from osmo_run.sdk.types import Phase
from tests.harbor.fake_daytona import BAD_GATEWAY_PAGE

COMPOSE_FAILURE = (
    "RuntimeError: Docker compose command failed for environment calculator. "
    "Command: docker compose -p osmo-1-calc -f /tmp/a/docker-compose-prebuilt.yaml "
    "-f /tmp/b/run-labels.compose.yaml up --detach --wait. Return code: 1. Stdout: . "
    "Stderr:  Network osmo-1-calc_default  Creating\n Network osmo-1-calc_default  Created\n"
    " Container osmo-1-calc-main-1  Creating\n"
    "Error response from daemon: pull access denied for osmo-run/missing, repository "
    "does not exist\n. "
)


def test_an_html_page_after_an_sdk_prefix_becomes_the_prefix_and_the_title() -> None:
    text = f"DaytonaBadGatewayError: Failed to create sandbox: {BAD_GATEWAY_PAGE}"
    assert short_message(text) == (
        "DaytonaBadGatewayError: Failed to create sandbox: 502 Bad Gateway"
    )


def test_an_html_page_without_a_title_becomes_its_first_text_not_its_styles() -> None:
    page = "<html><head><style>h1 { color: red }</style></head><body>\n"
    page += "<h1>Service &amp; API down</h1>"
    assert short_message(page + "<p>try later</p></body></html>") == "Service & API down"


def test_a_message_that_names_a_tag_is_not_taken_for_a_page() -> None:
    assert short_message("ValueError: expected a <body> tag") == "ValueError: expected a <body> tag"


def test_a_compose_failure_keeps_its_sentence_return_code_and_error_line() -> None:
    assert short_message(COMPOSE_FAILURE) == (
        "RuntimeError: Docker compose command failed for environment calculator "
        "(return code 1): Error response from daemon: pull access denied for "
        "osmo-run/missing, repository does not exist"
    )


def test_a_compose_failure_with_its_output_on_stdout_names_its_first_error_line() -> None:
    text = (
        "RuntimeError: Docker compose command failed for environment bad-image. Command: "
        "docker compose up --detach --wait. Return code: 1. Stdout:  main Pulling\n"
        " main Error pull access denied for osmo-run/does-not-exist\n"
        "Error response from daemon: pull access denied for osmo-run/does-not-exist:1\n. "
        "Stderr: None. "
    )
    assert short_message(text) == (
        "RuntimeError: Docker compose command failed for environment bad-image "
        "(return code 1): main Error pull access denied for osmo-run/does-not-exist"
    )


def test_a_traceback_becomes_the_exception_it_ends_with() -> None:
    text = "Traceback (most recent call last):\n  File \"x.py\", line 1\n    f()\nKeyError: 'k'\n"
    assert short_message(text) == "KeyError: 'k'"


def test_multi_line_text_keeps_its_first_line_with_a_letter_or_digit() -> None:
    assert short_message("\n-----\n  ValueError:   bad   row\nmore\n") == "ValueError: bad row"


def test_the_place_an_exception_was_raised_is_kept_after_the_cut() -> None:
    text = "RuntimeError: upstream said\n<p>no</p>\nmore (at /app/flow.py:12 in run)"
    assert short_message(text) == "RuntimeError: upstream said (at /app/flow.py:12 in run)"


def test_a_one_line_message_is_unchanged_and_a_long_one_is_cut() -> None:
    assert short_message("ZeroDivisionError: division by zero") == (
        "ZeroDivisionError: division by zero"
    )
    long = short_message("x" * 5000)
    assert len(long) == MAX_MESSAGE_CHARS
    assert long.endswith("…")


def test_a_failure_keeps_the_full_text_only_when_its_message_was_cut() -> None:
    cut = ExecutionResult.failure("r", ErrorCategory.INFRA_ERROR, COMPOSE_FAILURE, Phase.SETUP)
    assert cut.error_message is not None
    assert cut.error_message.startswith("RuntimeError: Docker compose command failed")
    assert cut.error_detail == COMPOSE_FAILURE.strip()
    whole = ExecutionResult.failure("r", ErrorCategory.AGENT_ERROR, "ValueError: bad")
    assert (whole.error_message, whole.error_detail) == ("ValueError: bad", None)
    back = ExecutionResult.from_dict(cut.to_dict())  # how a sandbox hands a result back
    assert (back.error_message, back.error_detail) == (cut.error_message, cut.error_detail)
