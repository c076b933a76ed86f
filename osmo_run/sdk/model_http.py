"""One HTTP POST to a model endpoint, three ways: a pooled ``aiohttp`` session, the
standard library in a thread pool of the run's size, or in a thread of its own per call (the
last two over kept-alive connections, :mod:`osmo_run.sdk.http_pool`).

:func:`osmo_run.sdk.llm.chat_completion` reaches them through
:class:`~osmo_run.sdk.model_clients.ModelClients`; this module knows nothing of chat
completions. Every poster returns an :class:`HTTPAnswer` for any HTTP status and raises
:class:`TransportError` when no answer came (refused, dropped, timed out). ``aiohttp`` is
imported only when an :class:`AiohttpPoster` first posts, so the SDK stays stdlib-only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import importlib
import socket
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from osmo_run.sdk.http_pool import SHARED_POOL


class HeaderLookup(Protocol):
    def get(self, name: str, /) -> str | None: ...


@dataclass
class HTTPAnswer:
    """An endpoint's answer: status, body and case-insensitive headers."""

    status: int
    body: bytes
    headers: HeaderLookup


class TransportError(Exception):
    """No answer came. ``retryable`` is false for a call that ran out of its own time (it
    already waited its whole timeout) and true for refused or dropped connections."""

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class ModelTransport(Protocol):
    """What answers a run's model calls in place of the network: given to
    :class:`~osmo_run.sdk.model_clients.ModelClients` (``transport=``), it answers every
    call of the run's rows, :func:`osmo_run.sdk.llm.chat_completion`'s and the agent
    integrations' alike, as ``httpx.MockTransport`` does under an ``httpx`` client
    (:class:`osmo_run.testing.MockModel` is one). The per-call retries, deadlines and usage
    accounting above it are the run's own.

    :meth:`post` returns an :class:`HTTPAnswer` for any status (its ``headers`` should also
    have ``items()``: the integrations copy them) or raises :class:`TransportError` when no
    answer came. It is called on the run's event loop and must not block it. The transport
    belongs to whoever made it: the run never closes it.
    """

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timeout_sec: float
    ) -> HTTPAnswer: ...


class Poster(ModelTransport, Protocol):
    """A transport the run owns (one per endpoint) and closes when it ends."""

    async def aclose(self) -> None: ...


def _timed_out(url: str, timeout_sec: float) -> TransportError:
    return TransportError(f"{url} did not answer within {timeout_sec:g}s", retryable=False)


def post_blocking(url: str, body: bytes, headers: dict[str, str], timeout_sec: float) -> HTTPAnswer:
    """POST on this thread over a kept-alive connection from
    :data:`~osmo_run.sdk.http_pool.SHARED_POOL`; through urllib when a ``*_proxy`` variable
    applies to ``url`` (urllib honours them)."""
    if proxy_for(url) is not None:
        return _post_with_urllib(url, body, headers, timeout_sec)
    parts = urlsplit(url)
    origin = SHARED_POOL.origin(parts)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    while True:
        connection, reused = SHARED_POOL.take(origin, timeout_sec)
        try:
            connection.request("POST", target, body=body, headers=headers)
            response = connection.getresponse()
            answer = HTTPAnswer(response.status, response.read(), response.headers)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            connection.close()
            if reused:  # the server closed it while idle: the call never reached it
                continue
            raise TransportError(
                f"cannot reach {url}: connection dropped", retryable=True
            ) from None
        except TimeoutError:
            connection.close()
            raise _timed_out(url, timeout_sec) from None
        except (OSError, http.client.HTTPException) as exc:  # refused, reset mid-answer
            connection.close()
            raise TransportError(f"cannot reach {url}: {exc}", retryable=True) from None
        if response.will_close:
            connection.close()
        else:
            SHARED_POOL.give_back(origin, connection)
        return answer


def _post_with_urllib(
    url: str, body: bytes, headers: dict[str, str], timeout_sec: float
) -> HTTPAnswer:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_sec) as response:
            return HTTPAnswer(response.status, response.read(), response.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            return HTTPAnswer(exc.code, exc.read(), exc.headers)
    except TimeoutError:
        raise _timed_out(url, timeout_sec) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError | socket.timeout):
            raise _timed_out(url, timeout_sec) from None
        raise TransportError(f"cannot reach {url}: {exc.reason}", retryable=True) from None
    except OSError as exc:  # reset or dropped mid-answer
        raise TransportError(f"cannot reach {url}: {exc}", retryable=True) from None


def proxy_for(url: str) -> str | None:
    """The proxy urllib would use for ``url`` (from ``*_proxy`` / ``NO_PROXY``), read once
    per endpoint instead of per call."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


class AiohttpPoster:
    """One ``aiohttp.ClientSession`` for one endpoint: at most ``limit`` connections, kept
    alive between calls, opened on the first call and closed by :meth:`aclose`."""

    def __init__(self, url: str, limit: int) -> None:
        self._limit = limit
        self._proxy = proxy_for(url)
        self._session: Any = None
        self._timeouts: dict[float, Any] = {}
        self._aiohttp: Any = None

    async def _open(self) -> Any:
        # Imported in a thread: importing aiohttp takes a second on a busy machine, and on
        # the loop that second would count as the calling row's own stall (its deadline).
        aiohttp = await asyncio.to_thread(importlib.import_module, "aiohttp")
        if self._session is not None:  # another row's first call opened it meanwhile
            return self._session
        self._aiohttp = aiohttp
        connector = aiohttp.TCPConnector(
            limit=self._limit, limit_per_host=0, keepalive_timeout=60.0, ttl_dns_cache=300
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),  # per call, below
            raise_for_status=False,
        )
        return self._session

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timeout_sec: float
    ) -> HTTPAnswer:
        session = self._session or await self._open()
        aiohttp = self._aiohttp
        timeout = self._timeouts.get(timeout_sec)
        if timeout is None:
            timeout = self._timeouts[timeout_sec] = aiohttp.ClientTimeout(total=timeout_sec)
        try:
            async with session.post(
                url, data=body, headers=headers, timeout=timeout, proxy=self._proxy
            ) as response:
                return HTTPAnswer(response.status, await response.read(), response.headers)
        except TimeoutError:  # aiohttp's own timeout errors are TimeoutErrors too
            raise _timed_out(url, timeout_sec) from None
        except (aiohttp.ClientError, OSError) as exc:
            reason = str(exc) or type(exc).__name__
            raise TransportError(f"cannot reach {url}: {reason}", retryable=True) from None

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class ThreadPoster:
    """urllib calls in a thread pool of ``limit`` threads (created as calls need them):
    where ``aiohttp`` is not installed, the run's concurrency still holds."""

    def __init__(self, limit: int) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=limit, thread_name_prefix="osmo-run-model"
        )

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timeout_sec: float
    ) -> HTTPAnswer:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, post_blocking, url, body, headers, timeout_sec
        )

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


async def post_in_own_thread(
    url: str, body: bytes, headers: dict[str, str], timeout_sec: float
) -> HTTPAnswer:
    """urllib in a daemon thread of its own: for calls made with no run's clients (inside a
    sandbox, one rollout per process, or outside any run). Never capped by a pool."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[HTTPAnswer] = loop.create_future()

    def deliver(outcome: HTTPAnswer | BaseException) -> None:
        if future.done():
            return  # the caller was cancelled
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def work() -> None:
        outcome: HTTPAnswer | BaseException
        try:
            outcome = post_blocking(url, body, headers, timeout_sec)
        except BaseException as exc:
            outcome = exc
        try:
            loop.call_soon_threadsafe(deliver, outcome)
        except RuntimeError:
            pass  # the loop has closed: nobody waits for this answer

    threading.Thread(target=work, name="osmo-run-model-call", daemon=True).start()
    return await future
