"""One API call per remote Harbor environment, before any row runs: does the provider take
these credentials, and does it answer?

Harbor's own preflight only checks that credential variables are set, so a wrong key, an
exhausted rate limit or a provider that is down would otherwise fail every row, one trial at
a time, each after Harbor's retries. A probe makes the cheapest authenticated call the
provider's SDK offers (for Daytona: list one sandbox) and turns a refusal into one
:class:`~osmo_run.errors.EnvironmentNotReady` line. It costs one call and creates nothing.

Only environments whose SDK is installed here and tested against a local fake have a probe
(:data:`REMOTE_PROBES`); the others keep Harbor's preflight alone.
"""

from __future__ import annotations

import asyncio
import http
import os
from collections.abc import Awaitable, Callable
from typing import Any

from harbor.models.environment_type import EnvironmentType

from osmo_run.errors import EnvironmentNotReady
from osmo_run.sdk.messages import short_message

PREFLIGHT_TIMEOUT_SEC = 30.0
"""How long a probe waits for the provider's answer, unless the spec's
``harbor.preflight_timeout_sec`` says otherwise."""

_DAYTONA_DEFAULT_URL = "https://app.daytona.io/api"
_DAYTONA_CREDENTIALS = "DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID)"
_DAYTONA_SECRETS = ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN")


def _status_text(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _daytona_refusal(exc: Exception, where: str) -> str:
    """The line for a Daytona SDK error from the probe: what the API said and what to do."""
    status: int | None = getattr(exc, "status_code", None)
    said = short_message(str(exc)).removeprefix("Failed to list sandboxes: ").strip()
    for name in _DAYTONA_SECRETS:  # an API may quote what it refused; the line is printed
        value = os.environ.get(name) or ""
        if len(value) >= 8:  # a real credential; a stand-in like "k" would blank the text
            said = said.replace(value, "***")
    answered = f"answered {_status_text(status)}" if status else "failed"
    answer = f"{answered}: {said}" if said else answered
    if status in (401, 403):
        return (
            f"--env daytona: {where} rejected the credentials ({answer}); "
            f"check {_DAYTONA_CREDENTIALS}"
        )
    if status == 429:
        return (
            f"--env daytona: {where} {answer} (rate limit or quota); "
            "wait for it to reset, or lower --concurrency, then run again"
        )
    if status is not None and status >= 500:
        return f"--env daytona: {where} {answer}; the service is failing, try again later"
    return f"--env daytona: {where} {answer}; check DAYTONA_API_URL and the network"


async def probe_daytona(timeout_sec: float) -> None:
    """List at most one sandbox with the credentials Harbor's Daytona environment will use
    (the ``daytona`` SDK reads the same ``DAYTONA_*`` variables).

    Raises :class:`EnvironmentNotReady` naming the API's URL (never the key) when the
    answer is a refusal (401/403), a rate limit (429), a server error, or nothing within
    ``timeout_sec``.
    """
    from daytona import AsyncDaytona, ListSandboxesQuery

    where = f"Daytona's API at {os.environ.get('DAYTONA_API_URL') or _DAYTONA_DEFAULT_URL}"

    async def list_one() -> None:
        async with AsyncDaytona() as client:
            listing: Any = client.list(ListSandboxesQuery(limit=1), request_timeout=timeout_sec)
            try:
                await anext(listing, None)
            finally:
                await listing.aclose()

    silent = (
        f"--env daytona: {where} did not answer within {timeout_sec:g}s; check "
        "DAYTONA_API_URL and the network (harbor.preflight_timeout_sec waits longer)"
    )
    try:
        await asyncio.wait_for(list_one(), timeout_sec)
    except TimeoutError:
        raise EnvironmentNotReady(silent) from None
    except Exception as exc:
        if type(exc).__name__ == "DaytonaConnectionTimeoutError":  # the SDK's own timeout
            raise EnvironmentNotReady(silent) from None
        raise EnvironmentNotReady(_daytona_refusal(exc, where)) from None


REMOTE_PROBES: dict[EnvironmentType, Callable[[float], Awaitable[None]]] = {
    EnvironmentType.DAYTONA: probe_daytona,
}
"""The one-call check of each remote environment that has one (see the module docstring)."""
