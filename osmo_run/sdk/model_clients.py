"""The run's model clients: one pooled HTTP client per run and endpoint, shared by its rows.

A backend that runs many rollouts in one process (``LocalBackend``) creates one
:class:`ModelClients` sized to the run's concurrency, makes it current around each rollout
(:func:`use_model_clients`) and closes it when the run ends (:meth:`ModelClients.aclose`,
Ctrl-C included). Inside a rollout, :func:`current_model_clients` finds it:

- :func:`osmo_run.sdk.llm.chat_completion` posts through one ``aiohttp`` session per
  endpoint (kept-alive connections, at most the run's concurrency of them), or, where
  ``aiohttp`` is not installed, through urllib in a thread pool of that size;
- the agent-framework integrations keep one ``AsyncOpenAI`` per endpoint in it
  (:meth:`ModelClients.shared`).

Where no run's clients are current (inside a sandbox, one rollout per process, or outside
any run) calls go through urllib in a thread of their own. Nothing is opened before the
first call. Stdlib only: ``aiohttp`` is imported on the first call that uses it.

The open-file limit: each connection is a file descriptor. :func:`raise_open_file_limit`
lifts the soft limit toward the hard one (once per process) and the connection pool stays
below what remains (:attr:`ModelClients.capped_message` says so when that is fewer
connections than the concurrency; calls beyond it wait for a free connection).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import importlib.util
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from osmo_run.sdk.model_http import (
    AiohttpPoster,
    HTTPAnswer,
    ModelTransport,
    Poster,
    ThreadPoster,
)
from osmo_run.sdk.model_retry import DEFAULT_POLICY, CallRetryPolicy

T = TypeVar("T")

FD_RESERVE = 256
"""File descriptors left for everything but model connections: output files, pipes, the
embedded server, the workflow's own files."""

_LIMIT_RAISED: list[tuple[int, int]] = []


def raise_open_file_limit() -> tuple[int, int]:
    """Lift the soft ``RLIMIT_NOFILE`` to the hard limit, once per process; return
    ``(soft, hard)`` as they are afterwards (``(-1, -1)`` where the platform has none).
    Never raises: a limit that cannot be raised stays as it was."""
    if _LIMIT_RAISED:
        return _LIMIT_RAISED[0]
    try:
        import resource
    except ImportError:  # not a Unix
        _LIMIT_RAISED.append((-1, -1))
        return _LIMIT_RAISED[0]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    for target in (wanted, 10240):  # macOS refuses more than OPEN_MAX (10240) for a soft limit
        if soft != resource.RLIM_INFINITY and target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
                break
            except (ValueError, OSError):
                continue
    _LIMIT_RAISED.append((soft, hard))
    return _LIMIT_RAISED[0]


def connection_budget(concurrency: int) -> tuple[int, str | None]:
    """``(connections, message)``: how many model connections a run of ``concurrency`` may
    hold under the open-file limit (raised first), and one line saying so when that is
    fewer than ``concurrency`` (else ``None``)."""
    soft, _ = raise_open_file_limit()
    if soft < 0 or soft - FD_RESERVE >= concurrency:
        return concurrency, None
    budget = max(soft - FD_RESERVE, 8)
    message = (
        f"open-file limit {soft} (ulimit -n) allows {budget} model connections: "
        f"{concurrency - budget} of the {concurrency} rows in flight wait for one; "
        "raise the hard limit to lift this"
    )
    return budget, message


def aiohttp_installed() -> bool:
    return importlib.util.find_spec("aiohttp") is not None


def endpoint_key(url: str) -> tuple[str, str]:
    """What makes two URLs the same endpoint for pooling: scheme and host:port."""
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


class ModelClients:
    """Model clients of one run, shared by its rollouts (see the module docstring).

    ``concurrency`` is the run's; at most that many connections per endpoint are open
    (fewer when the open-file limit says so: :attr:`connections`,
    :attr:`capped_message`). ``use_aiohttp`` defaults to whether it is installed.
    ``retry`` is how each call is retried. ``transport``, when given, answers every call
    of every endpoint instead of the network (a test's scripted model: see
    :class:`~osmo_run.sdk.model_http.ModelTransport`); it may also be set before the
    first call. Use from one event loop; close once.
    """

    def __init__(
        self,
        concurrency: int,
        *,
        retry: CallRetryPolicy = DEFAULT_POLICY,
        use_aiohttp: bool | None = None,
        transport: ModelTransport | None = None,
    ) -> None:
        self.transport = transport
        self.concurrency = max(1, concurrency)
        self.retry = retry
        self.connections, self.capped_message = connection_budget(self.concurrency)
        self.use_aiohttp = aiohttp_installed() if use_aiohttp is None else use_aiohttp
        self._shared: dict[Hashable, tuple[Any, Callable[[Any], Awaitable[None]]]] = {}
        self._closed = False
        self.created: dict[str, int] = {}
        """How many clients of each kind were created (``"aiohttp"``, ``"threads"``, or
        the ``kind`` an integration names): one per endpoint in a run."""

    @property
    def closed(self) -> bool:
        return self._closed

    async def load(self) -> None:
        """Import the HTTP library calls will use (``aiohttp``: a second on a busy machine),
        in a thread, before the run's rows start: else the first row's first call pays
        for it, against its deadline. Opens nothing."""
        if self.use_aiohttp:
            await asyncio.to_thread(importlib.import_module, "aiohttp")

    def shared(
        self,
        key: Hashable,
        create: Callable[[], T],
        close: Callable[[T], Awaitable[None]],
        kind: str = "client",
    ) -> T:
        """The client stored under ``key``, made by ``create()`` the first time and closed by
        ``close(client)`` in :meth:`aclose`. Raises ``RuntimeError`` once closed (the run
        has ended)."""
        if self._closed:
            raise RuntimeError("the run's model clients are closed: the run has ended")
        entry = self._shared.get(key)
        if entry is None:
            client = create()
            self.created[kind] = self.created.get(kind, 0) + 1
            entry = self._shared[key] = (client, close)
        return entry[0]

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timeout_sec: float
    ) -> HTTPAnswer:
        """POST ``body`` to ``url`` through this run's client for its endpoint; an answer for
        any status, :class:`~osmo_run.sdk.model_http.TransportError` when none came."""
        if self.transport is not None:
            if self._closed:
                raise RuntimeError("the run's model clients are closed: the run has ended")
            return await self.transport.post(url, body, headers, timeout_sec)
        poster = self.shared(
            ("post", *endpoint_key(url)),
            lambda: self._poster(url),
            _aclose,
            "aiohttp" if self.use_aiohttp else "threads",
        )
        return await poster.post(url, body, headers, timeout_sec)

    def _poster(self, url: str) -> Poster:
        if self.use_aiohttp:
            return AiohttpPoster(url, self.connections)
        return ThreadPoster(self.connections)

    async def aclose(self) -> None:
        """Close every client, newest first; idempotent; never raises (but for
        cancellation)."""
        self._closed = True
        entries, self._shared = list(self._shared.values()), {}
        for client, close in reversed(entries):
            try:
                await close(client)
            except Exception:  # a client that fails to close must not hide the others
                continue


async def _aclose(poster: Poster) -> None:
    await poster.aclose()


_current_clients: contextvars.ContextVar[ModelClients | None] = contextvars.ContextVar(
    "osmo_run_model_clients", default=None
)


def current_model_clients() -> ModelClients | None:
    """The model clients of the run this code runs in, or ``None`` (a sandbox, no run)."""
    clients = _current_clients.get()
    return None if clients is None or clients.closed else clients


def use_model_clients(
    clients: ModelClients | None,
) -> contextvars.Token[ModelClients | None]:
    """Make ``clients`` current in this context; undo with :func:`reset_model_clients`."""
    return _current_clients.set(clients)


def reset_model_clients(token: contextvars.Token[ModelClients | None]) -> None:
    _current_clients.reset(token)
