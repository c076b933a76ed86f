"""Make a model endpoint on the host's loopback reachable from Docker trial containers.

``127.0.0.1`` inside a container is the container itself. The relay listens on the Docker
bridge's gateway address (reachable from every container, not from other machines) and
pipes each connection to the loopback endpoint, so a local model server needs no
reconfiguration. It lives on the run's event loop and stops with the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from urllib.parse import urlparse, urlunparse

from osmo_run.backends.harbor import docker as docker_ops
from osmo_run.errors import EnvironmentNotReady
from osmo_run.sdk.context import LLMEndpoint

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


async def reach_from_trials(
    llm: LLMEndpoint | None, local_docker: bool, section: str = "llm"
) -> tuple[str | None, LoopbackRelay | None]:
    """The model endpoint's base URL as trial containers reach it, and the relay started to
    make a loopback endpoint reachable from Docker containers (``None`` when none is needed;
    the caller closes it when the run ends). ``section`` names the spec section of the
    endpoint in errors (``llm``, ``judge``).

    Raises :class:`EnvironmentNotReady` for a loopback endpoint with a remote environment
    (its sandboxes cannot reach this machine's loopback) or when the relay cannot listen.
    """
    if llm is None or not is_loopback(llm.base_url):
        return (None if llm is None else llm.base_url), None
    if not local_docker:
        raise EnvironmentNotReady(
            f"{section}.base_url {llm.base_url} is a loopback address (this machine), "
            "which a remote sandbox cannot reach; serve the model on a public address and set "
            f"{section}.base_url to it"
        )
    relay, gateway, port = await start_relay(llm.base_url, f"{section}.base_url")
    return rewrite_url(llm.base_url, gateway, port), relay


async def start_relay(url: str, what: str) -> tuple[LoopbackRelay, str, int]:
    """A relay from Docker's bridge gateway to the loopback endpoint ``url``: the relay
    (the caller closes it when the run ends), the gateway address and the port it listens
    on. ``what`` names ``url`` in errors (``llm.base_url``).

    Raises :class:`EnvironmentNotReady` when the gateway is unknown or not one address, or
    the relay cannot listen.
    """
    gateway = await docker_ops.bridge_gateway()
    if not gateway or ipaddress.ip_address(gateway).is_unspecified:
        # asyncio would listen on every interface: the model open to other machines
        raise EnvironmentNotReady(f"Docker's bridge gateway {gateway!r} is not one address")
    relay = LoopbackRelay(*url_target(url))
    try:
        port = await relay.start(gateway)
    except OSError as exc:
        raise EnvironmentNotReady(
            f"{what} {url} is a loopback address and relaying it into containers on "
            f"{gateway} failed ({exc}); serve the model on an address containers reach"
        ) from None
    return relay, gateway, port
