"""The model gateway of Harbor trials: their calls to a loopback model endpoint, through the
run's model layer.

``127.0.0.1`` inside a container is the container itself. The gateway
(:class:`~osmo_run.backends.gateway.ModelGateway`) listens on the Docker bridge's gateway
address (reachable from every container, not from other machines), so a local model server
needs no reconfiguration, and forwards each HTTP request to the loopback endpoint, each
model call under the run's limits and budget. It lives on the run's event loop and stops
with the run.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlparse

from osmo_run.backends.gateway import ModelGateway, is_loopback, rewrite_url
from osmo_run.backends.harbor import docker as docker_ops
from osmo_run.errors import EnvironmentNotReady
from osmo_run.sdk.context import LLMEndpoint
from osmo_run.sdk.model_layer import ModelLayer

__all__ = [
    "ModelGateway",
    "is_loopback",
    "reach_from_trials",
    "rewrite_url",
    "start_relay",
    "url_target",
]


def url_target(url: str) -> tuple[str, int]:
    """``(host, port)`` that ``url`` connects to."""
    parts = urlparse(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.hostname or "127.0.0.1", parts.port or default


async def reach_from_trials(
    llm: LLMEndpoint | None,
    local_docker: bool,
    section: str = "llm",
    layer: ModelLayer | None = None,
) -> tuple[str | None, ModelGateway | None]:
    """The model endpoint's base URL as trial containers reach it, and the gateway started
    to make a loopback endpoint reachable from Docker containers (``None`` when none is
    needed; the caller closes it when the run ends), its calls governed by ``layer``.
    ``section`` names the spec section of the endpoint in errors (``llm``, ``judge``).

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
    relay, gateway, port = await start_relay(llm.base_url, f"{section}.base_url", layer)
    return rewrite_url(llm.base_url, gateway, port), relay


async def start_relay(
    url: str, what: str, layer: ModelLayer | None = None
) -> tuple[ModelGateway, str, int]:
    """A :class:`ModelGateway` from Docker's bridge gateway to the loopback endpoint ``url``,
    its calls governed by ``layer``: the gateway (the caller closes it when the run ends),
    the bridge address and the port it listens on. ``what`` names ``url`` in errors
    (``llm.base_url``).

    Raises :class:`EnvironmentNotReady` when the gateway is unknown or not one address, or
    the relay cannot listen.
    """
    gateway = await docker_ops.bridge_gateway()
    if not gateway or ipaddress.ip_address(gateway).is_unspecified:
        # asyncio would listen on every interface: the model open to other machines
        raise EnvironmentNotReady(f"Docker's bridge gateway {gateway!r} is not one address")
    relay = ModelGateway(url, layer)
    try:
        port = await relay.start(gateway)
    except OSError as exc:
        raise EnvironmentNotReady(
            f"{what} {url} is a loopback address and relaying it into containers on "
            f"{gateway} failed ({exc}); serve the model on an address containers reach"
        ) from None
    return relay, gateway, port
