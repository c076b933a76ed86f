"""Kept-alive stdlib HTTP connections, shared by the threads that post model calls.

Inside a sandbox (a Harbor trial, ``--isolation process``) model calls go through the
standard library, one thread per call. urllib opens and closes a TCP connection per call;
from a trial each of those also costs the loopback relay a new upstream connection. Here idle
``http.client`` connections are kept per ``(scheme, host, port)`` and reused, so a rollout's
tenth call pays no connect. Stdlib only (this runs in sandboxes).
"""

from __future__ import annotations

import atexit
import http.client
import ssl
import threading
import time
from urllib.parse import SplitResult

MAX_IDLE_PER_ORIGIN = 1024
"""Idle connections kept per origin; more are closed when given back. Up to a run's
concurrency of calls share this pool where aiohttp is missing (the thread pool of the run's
size), so it must hold that many for reuse to work; a sandbox's one rollout needs a few."""

IDLE_TIMEOUT_SEC = 30.0
"""An idle connection older than this is closed instead of reused: servers drop idle
connections after a while (often 5-60 s), and a stale one costs a failed attempt."""

Origin = tuple[str, str, int]


class ConnectionPool:
    """Idle connections by origin. :meth:`take` hands out an idle one or a new one;
    :meth:`give_back` keeps it for the next call. Thread-safe."""

    def __init__(self) -> None:
        self._idle: dict[Origin, list[tuple[http.client.HTTPConnection, float]]] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None

    @staticmethod
    def origin(parts: SplitResult) -> Origin:
        scheme = parts.scheme or "http"
        default = 443 if scheme == "https" else 80
        return scheme, parts.hostname or "localhost", parts.port or default

    def take(self, origin: Origin, timeout_sec: float) -> tuple[http.client.HTTPConnection, bool]:
        """A connection to ``origin`` and whether it was reused (a reused one may have been
        closed by the server meanwhile: retry once on a new one if it fails before any
        answer)."""
        connection = self._fresh_idle(origin)
        if connection is not None:
            connection.timeout = timeout_sec
            if connection.sock is not None:
                connection.sock.settimeout(timeout_sec)
            return connection, True
        return self._new(origin, timeout_sec), False

    def give_back(self, origin: Origin, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(origin, [])
            if len(idle) < MAX_IDLE_PER_ORIGIN:
                idle.append((connection, time.monotonic()))
                return
        connection.close()

    def close_all(self) -> None:
        """Close every idle connection (at the process's exit)."""
        with self._lock:
            idle = [connection for pool in self._idle.values() for connection, _ in pool]
            self._idle.clear()
        for connection in idle:
            connection.close()

    def _fresh_idle(self, origin: Origin) -> http.client.HTTPConnection | None:
        """The most recently used idle connection to ``origin`` that is not too old; older
        ones are closed."""
        stale: list[http.client.HTTPConnection] = []
        found = None
        with self._lock:
            idle = self._idle.get(origin) or []
            while idle and found is None:
                connection, since = idle.pop()
                if time.monotonic() - since <= IDLE_TIMEOUT_SEC:
                    found = connection
                else:
                    stale.append(connection)
        for connection in stale:
            connection.close()
        return found

    def _new(self, origin: Origin, timeout_sec: float) -> http.client.HTTPConnection:
        scheme, host, port = origin
        if scheme != "https":
            return http.client.HTTPConnection(host, port, timeout=timeout_sec)
        with self._lock:
            if self._tls is None:  # one TLS context per process: building one costs ~40 ms
                self._tls = ssl.create_default_context()
            tls = self._tls
        return http.client.HTTPSConnection(host, port, timeout=timeout_sec, context=tls)


SHARED_POOL = ConnectionPool()
"""The process's pool: one per process, as the process has one set of endpoints."""
atexit.register(SHARED_POOL.close_all)
