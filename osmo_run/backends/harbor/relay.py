"""Make a model endpoint on the host's loopback reachable from Docker trial containers.

``127.0.0.1`` inside a container is the container itself. The relay listens on the Docker
bridge's gateway address (reachable from every container, not from other machines) and
pipes each connection to the loopback endpoint, so a local model server needs no
reconfiguration. It lives on the run's event loop and stops with the run.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlparse, urlunparse

_CHUNK = 64 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class LoopbackRelay:
    """Forwards TCP connections from ``listen_host:<free port>`` to ``target``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        for task in (
            asyncio.ensure_future(_pipe(reader, upstream_writer)),
            asyncio.ensure_future(_pipe(upstream_reader, writer)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def start(self, listen_host: str) -> int:
        """Start listening; return the port. Raises ``OSError`` if ``listen_host`` is not ours."""
        self._server = await asyncio.start_server(self._handle, listen_host, 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None


def rewrite_url(url: str, host: str, port: int) -> str:
    """``url`` with its host and port replaced (path and query kept)."""
    parts = urlparse(url)
    return urlunparse(parts._replace(netloc=f"{host}:{port}"))


def url_target(url: str) -> tuple[str, int]:
    """``(host, port)`` that ``url`` connects to."""
    parts = urlparse(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.hostname or "127.0.0.1", parts.port or default
