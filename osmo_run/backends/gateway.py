"""The run's model gateway: model calls made outside this process, through its model layer.

Calls from Harbor trials (Docker containers) and from ``--isolation process`` children do
not pass through this process's model layer (:mod:`osmo_run.sdk.model_layer`).
:class:`ModelGateway` is an HTTP server on an address they reach that forwards each request
to the endpoint, so that the host governs their calls as it governs its own: each POST (a
model call) waits for a slot under the endpoint's limit, shared with the run's in-process
calls to the same endpoint (the judge), is refused while the run's budget is spent, and its
answer's ``usage`` is counted against the budget; 429s (and 503s with ``Retry-After``)
shrink the limit and count in the run's 429s. Other requests (``GET /v1/models``) pass as
they are. It lives on the run's event loop and stops with the run.
"""

from __future__ import annotations

import asyncio
import io
import ipaddress
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse, urlsplit, urlunparse

import aiohttp
from aiohttp import web

from osmo_run.errors import BudgetExceededError
from osmo_run.sdk.llm import usage_tokens
from osmo_run.sdk.model_budget import refusal_answer
from osmo_run.sdk.model_layer import (
    ModelLayer,
    answered,
    model_call,
    record_spent,
    reset_model_layer,
    use_model_layer,
)

_CHUNK = 64 * 1024
_STREAM_TAIL = 64 * 1024
"""How much of a streamed answer's end is kept to read its ``usage`` (the last event)."""

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED = _HOP_BY_HOP | {"host", "content-length", "accept-encoding"}
"""Request headers the gateway sets itself. ``Accept-Encoding`` is dropped so that answers
come uncompressed and their ``usage`` can be read."""
_NOT_RETURNED = _HOP_BY_HOP | {"content-length", "content-encoding"}
"""Answer headers the gateway's server sets itself (the client decoded any encoding)."""

MAX_BODY_BYTES = 128 * 1024 * 1024
"""The largest request the gateway forwards (a long conversation with images passes a few
MiB; it is read whole, into this process's memory): a larger one is answered 413 and
never read, so a runaway or hostile trial cannot exhaust the host's memory."""

SHUTDOWN_GRACE_SEC = 1.0
"""How long closing the gateway waits for requests in flight (the run has ended)."""


class ModelGateway:
    """Forwards HTTP requests from ``listen_host:<free port>`` to the endpoint at ``target``
    (``scheme://host:port``), each POST through ``layer`` (see the module docstring; without
    a layer, requests pass ungoverned).

    It does not retry: the caller's client (the SDK in the trial or child) retries (a 429
    or 5xx goes back to it as it came), and each retry passes through the gateway again as
    a new call under the limit. Retrying here as well would multiply the tries per call,
    keep the caller waiting past its own per-call deadline, and hide from its client the
    429s its backoff reacts to. A budget refusal is answered with
    :func:`~osmo_run.sdk.model_budget.refusal_answer`, which the caller's SDK raises as
    ``BudgetExceededError``. Nothing of a request (its ``Authorization`` key included) is
    logged.
    """

    def __init__(
        self, target: str, layer: ModelLayer | None = None, max_body_bytes: int = MAX_BODY_BYTES
    ) -> None:
        parts = urlsplit(target)
        self._origin = f"{parts.scheme or 'http'}://{parts.netloc}"
        self._layer = layer
        self._max_body_bytes = max_body_bytes
        self._runner: web.ServerRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._calls: set[asyncio.Future[web.StreamResponse]] = set()

    async def start(self, listen_host: str) -> int:
        """Start listening; return the port. Raises ``OSError`` if ``listen_host`` is not ours."""
        server = web.Server(self._handle, handler_cancellation=True, access_log=None)
        runner = web.ServerRunner(server, shutdown_timeout=SHUTDOWN_GRACE_SEC)
        await runner.setup()
        site = web.TCPSite(runner, listen_host, 0)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        # No limit on connections: the layer's limit holds the calls in flight.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60.0)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),
            # a proxy the machine sets applies to an endpoint elsewhere, never to this one
            trust_env=not is_loopback(self._origin),
        )
        port: int = runner.addresses[0][1]
        return port

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        session, self._session = self._session, None
        if runner is not None:
            await runner.cleanup()
        calls = list(self._calls)  # streams read on after their trials left
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        if session is not None:
            await session.close()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        token = use_model_layer(self._layer)  # this request's task only
        try:
            return await self._forward(request)
        finally:
            reset_model_layer(token)

    async def _forward(self, request: web.BaseRequest) -> web.StreamResponse:
        session = self._session
        if session is None:
            raise web.HTTPServiceUnavailable()
        url = self._origin + request.path_qs
        body = await self._read_body(request)  # whole: a long conversation passes 1 MiB
        if body is None:
            limit = f"{self._max_body_bytes:,}"
            message = f"the run's model gateway forwards requests of at most {limit} bytes"
            return web.json_response({"error": {"message": message}}, status=413)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
        try:
            if request.method != "POST":  # not a model call: nothing to limit or count
                async with session.request(
                    request.method, url, data=body or None, headers=headers, allow_redirects=False
                ) as upstream:
                    return await _pass_back(request, upstream)
            call = _Call()
            exchange = asyncio.ensure_future(self._model_call(request, url, body, headers, call))
            self._calls.add(exchange)
            exchange.add_done_callback(_forget(self._calls))
            try:
                return await asyncio.shield(exchange)
            except asyncio.CancelledError:
                # The trial went away. A call still waiting for its answer ends here (its
                # slot frees; the endpoint sees the connection close). One whose stream has
                # begun is read to its end by itself, so that its usage is counted: else a
                # trial could read the content and leave before the last event, uncounted.
                if not call.streaming:
                    exchange.cancel()
                raise
        except BudgetExceededError as exc:
            status, refusal_headers, payload = refusal_answer(str(exc))
            return web.Response(status=status, headers=refusal_headers, body=payload)
        except (aiohttp.ClientError, OSError) as exc:
            reason = str(exc) or type(exc).__name__
            # a 5xx, retried by the caller's client as the failed connection was
            message = f"the run's model gateway could not reach {self._origin}: {reason}"
            return web.json_response({"error": {"message": message}}, status=502)

    async def _model_call(
        self,
        request: web.BaseRequest,
        url: str,
        body: bytes,
        headers: dict[str, str],
        call: _Call,
    ) -> web.StreamResponse:
        """One POST through the layer, its answer passed back (raises what ``_forward``
        answers for)."""
        assert self._session is not None
        async with (
            model_call(url) as slot,
            self._session.post(
                url, data=io.BytesIO(body), headers=headers, allow_redirects=False
            ) as upstream,  # a file: aiohttp warns of large bytes blocking the loop
        ):
            slot.done(answered(upstream.status, upstream.headers))
            return await _pass_back(request, upstream, True, _model_of(body), call)

    async def _read_body(self, request: web.BaseRequest) -> bytes | None:
        """The request's body, or ``None`` once it passes ``max_body_bytes`` (read no further:
        the connection is closed after the answer)."""
        declared = request.content_length
        if declared is not None and declared > self._max_body_bytes:
            return None
        parts: list[bytes] = []
        size = 0
        while chunk := await request.content.read(_CHUNK):
            size += len(chunk)
            if size > self._max_body_bytes:
                return None
            parts.append(chunk)
        return b"".join(parts)


class _Call:
    """What the gateway knows of a model call in flight: whether its answer streams back."""

    __slots__ = ("streaming",)

    def __init__(self) -> None:
        self.streaming = False


def _forget(calls: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    """A done callback: drop the call from ``calls`` and take its exception (a call read to
    its end after its trial left has nobody awaiting it)."""

    def done(call: asyncio.Future[Any]) -> None:
        calls.discard(call)
        if not call.cancelled():
            call.exception()

    return done


async def _pass_back(
    request: web.BaseRequest,
    upstream: aiohttp.ClientResponse,
    is_model_call: bool = False,
    model: str | None = None,
    call: _Call | None = None,
) -> web.StreamResponse:
    """``upstream``'s answer, passed back unchanged (status, headers, body; a streamed one
    as it comes). A successful model call's answer (``is_model_call``) counts against the
    run's budget, priced as ``model``'s (the one the call asked for); a stream is read to
    its end and counted even where the caller left before it (``call.streaming`` says it
    began)."""
    headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _NOT_RETURNED}
    counted = is_model_call and 200 <= upstream.status < 300
    if "event-stream" not in upstream.headers.get("content-type", ""):
        payload = await upstream.read()
        if counted:
            _count(_json_usage(payload), model)
        return web.Response(status=upstream.status, headers=headers, body=payload)
    response = web.StreamResponse(status=upstream.status, headers=headers)
    await response.prepare(request)
    if call is not None:
        call.streaming = True
    tail = b""
    caller_left = False
    try:
        async for chunk in upstream.content.iter_any():
            tail = (tail + chunk)[-_STREAM_TAIL:]
            if not caller_left:
                try:
                    await response.write(chunk)
                except ConnectionError:
                    caller_left = True  # read on: the usage comes last
    except (aiohttp.ClientError, OSError):
        # the endpoint dropped the stream: end the trial's too, unfinished (it sees the
        # stream cut, as it would have without the gateway), counting nothing
        response.force_close()
        return response
    if counted:
        _count(_stream_usage(tail), model)
    if not caller_left:
        await response.write_eof()
    return response


def _count(usage: object, model: str | None) -> None:
    """Count an answered call's ``usage`` against the run's budget; an answer without a
    usable one fails a ``tokens`` or ``usd`` budget closed, as in-process calls do."""
    prompt, completion, uncounted, _ = usage_tokens(usage)
    record_spent(prompt, completion, model, uncounted)


def _model_of(body: bytes) -> str | None:
    """The ``model`` a call's JSON body asks for (priced as it), else ``None``."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


def _json_usage(payload: bytes) -> Any:
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    return data.get("usage") if isinstance(data, dict) else None


def _stream_usage(tail: bytes) -> Any:
    """The ``usage`` of the last server-sent event in ``tail`` that carries one (a chat
    completion's last chunk with ``stream_options.include_usage``; a response's
    ``response.completed``), else ``None``."""
    usage = None
    for line in tail.splitlines():
        if not line.startswith(b"data:"):
            continue
        try:
            event = json.loads(line[5:].strip())
        except (ValueError, RecursionError):
            continue
        if not isinstance(event, dict):
            continue
        inner = event.get("response")
        found = event.get("usage") or (inner.get("usage") if isinstance(inner, dict) else None)
        if found:
            usage = found
    return usage


def is_loopback(url: str) -> bool:
    """Whether ``url`` points at this machine only: its loopback interface, or the
    unspecified address (``0.0.0.0``, ``::``), which a connection from here takes to
    mean this host, as a server listening on every interface prints it. Inside a
    container both mean the container, so both are relayed."""
    host = urlparse(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def rewrite_url(url: str, host: str, port: int) -> str:
    """``url`` with its host and port replaced (path and query kept)."""
    parts = urlparse(url)
    return urlunparse(parts._replace(netloc=f"{host}:{port}"))
