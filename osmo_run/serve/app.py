"""The HTTP face of ``osmo-run serve``: osmosis-ai 0.3.8's four routes on Starlette, and
``/metrics``.

``POST /rollout`` (202 with a lease token; 429 + ``Retry-After``; 409; 413; 422; 503),
``GET /rollout/{id}/result`` (long-poll under ``X-Osmosis-Rollout-Lease``; 403/404),
``POST /rollout/cancel``, ``GET /health`` and ``GET /metrics`` (Prometheus text); and
osmo-run's own batch routes, which osmosis clients never need: ``POST /rollouts`` (many
admissions in one request, answered per item) and ``POST /rollouts/results`` (many
long-polls in one), advertised in ``GET /health`` as ``"batch": {"max_items": N}``. With a
server key every route needs ``Authorization: Bearer <key>`` (compared in constant time),
else 401. Every error body is ``{"detail": "<one line>"}``; no error ever quotes a request's
model key.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from osmo_run.serve.protocol import (
    MAX_BATCH_ITEMS,
    POLLING_LEASE_HEADER,
    BadBody,
    BatchTooLarge,
    parse_cancel_request,
    parse_lease_batch,
    parse_rollout_batch,
    parse_rollout_request,
)
from osmo_run.serve.rollouts import Refused, ServedRollouts

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
"""Bodies over this answer 413 (before they are read whole)."""


class WireJSON(JSONResponse):
    """JSON that always encodes: a lone surrogate is sent as its ``\\u`` escape, and a
    sample that JSON cannot hold (NaN, an object) is sent with its reward alone (as
    osmosis does: a diagnostic must never make a reward unreadable)."""

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except UnicodeEncodeError:
            pass
        except (ValueError, TypeError, RecursionError):
            content = _reward_only(content)
        try:
            return json.dumps(content, allow_nan=False).encode("ascii")
        except (ValueError, TypeError, RecursionError):
            return json.dumps(_reward_only(content)).encode("ascii")


def _reward_only(content: Any) -> Any:
    if not isinstance(content, dict) or not isinstance(content.get("sample"), dict):
        return content
    sample = content["sample"]
    label = sample.get("label")
    kept = {
        "messages": [],
        "label": label if isinstance(label, str) else None,
        "reward": sample.get("reward"),
        "remove_sample": bool(sample.get("remove_sample")),
        "metrics": {},
        "extra_fields": {},
    }
    return {**content, "sample": kept}


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return WireJSON({"detail": detail}, status_code=status, headers=headers)


class _TooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, up to ``limit`` bytes; :class:`_TooLarge` beyond (a declared length over
    the limit is refused before a byte is read)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


class _BearerAuth:
    """Refuses (401) every request without ``Authorization: Bearer <key>``."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self._app = app
        self._expected = ("Bearer " + key).encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = b""
            for name, value in scope.get("headers") or []:
                if name == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self._expected):
                await _error(401, "unauthorized")(scope, receive, send)
                return
        await self._app(scope, receive, send)


Handler = Callable[[Request], Awaitable[Response]]
T = TypeVar("T")


def create_app(
    rollouts: ServedRollouts,
    backend_health: Callable[[], dict[str, Any]],
    *,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    on_request: Callable[[str, int], None] | None = None,
    batch: bool = True,
) -> ASGIApp:
    """The app serving ``rollouts``. ``backend_health`` gives the backend's fields of
    ``GET /health``; ``api_key`` (if any) is the server key; ``on_request(route, status)``
    counts answers (metrics). ``batch=False`` leaves the batch routes out (a server as
    osmosis's own: clients fall back to one request per rollout)."""

    def answered(route: str, response: Response) -> Response:
        rollouts.metrics.answered(route, response.status_code)
        if on_request is not None:
            on_request(route, response.status_code)
        return response

    async def parsed_body(
        route: str, request: Request, parse: Callable[[bytes], T]
    ) -> T | Response:
        """The body as ``parse`` reads it, or the refusal to answer: 413 over the size
        limit or a batch's item bound, 422 naming what is wrong."""
        try:
            return parse(await _read_body(request, max_body_bytes))
        except _TooLarge:
            return answered(route, _error(413, f"body over {max_body_bytes} bytes"))
        except BatchTooLarge as exc:
            return answered(route, _error(413, str(exc)))
        except BadBody as exc:
            return answered(route, _error(422, str(exc)))

    async def submit(request: Request) -> Response:
        parsed = await parsed_body("submit", request, parse_rollout_request)
        if isinstance(parsed, Response):
            return parsed
        try:
            reply = rollouts.admit(parsed)
        except Refused as exc:
            return answered("submit", _error(exc.status, exc.detail, exc.headers))
        return answered("submit", WireJSON(reply, status_code=202))

    async def result(request: Request) -> Response:
        token = request.headers.get(POLLING_LEASE_HEADER)
        if not token:
            return answered("result", _error(422, f"header {POLLING_LEASE_HEADER} is required"))
        rollout_id = request.path_params["rollout_id"]
        try:
            reply = await rollouts.result(rollout_id, token)
        except Refused as exc:
            return answered("result", _error(exc.status, exc.detail))
        return answered("result", WireJSON(reply))

    async def cancel(request: Request) -> Response:
        parsed = await parsed_body("cancel", request, parse_cancel_request)
        if isinstance(parsed, Response):
            return parsed
        dispositions = rollouts.cancel(parsed.ids, parsed.prefix, parsed.all)
        return answered("cancel", WireJSON({"dispositions": dispositions}))

    async def submit_batch(request: Request) -> Response:
        items = await parsed_body("submit_batch", request, parse_rollout_batch)
        if isinstance(items, Response):
            return items
        answers = rollouts.admit_batch(items)
        settings = rollouts.settings
        reply = {
            "answers": answers,
            "result_wait_timeout_sec": settings.result_wait_sec,
            "polling_lease_timeout_sec": settings.lease_sec,
        }
        return answered("submit_batch", WireJSON(reply))

    async def results_batch(request: Request) -> Response:
        leases = await parsed_body("results_batch", request, parse_lease_batch)
        if isinstance(leases, Response):
            return leases
        return answered("results_batch", WireJSON(await rollouts.results_batch(leases)))

    async def health(request: Request) -> Response:
        payload = rollouts.health(backend_health())
        if batch:
            payload["batch"] = {"max_items": MAX_BATCH_ITEMS}
        return answered("health", WireJSON(payload))

    async def metrics(request: Request) -> Response:
        text = rollouts.metrics.render(rollouts.health(backend_health()))
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    batch_routes = [
        Route("/rollouts", submit_batch, methods=["POST"]),
        Route("/rollouts/results", results_batch, methods=["POST"]),
    ]
    app: ASGIApp = Starlette(
        routes=[
            *(batch_routes if batch else []),
            Route("/rollout", submit, methods=["POST"]),
            Route("/rollout/cancel", cancel, methods=["POST"]),
            Route("/rollout/{rollout_id:str}/result", result, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )
    if api_key is not None:
        app = _BearerAuth(app, api_key)
    return app
