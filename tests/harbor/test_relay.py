"""Finding the host's address on Docker's bridge, where the model relay listens for trials.

``fixtures/fresh-engine-bridge.json`` is ``docker network inspect bridge`` of an engine
whose data root was just created (Docker 20.10.24, started in a network namespace of its
own so that the shared engine was left alone): its IPAM config has a subnet and no
gateway until the engine restarts. Reading only the gateway gave ``""``; the relay then
listened on every interface and the trials were sent to ``http://:PORT/v1``, and every
model call of the first run on a new CI machine failed ("Name or service not known").
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from osmo_run.backends.harbor import docker as docker_ops  # noqa: E402
from osmo_run.backends.harbor.docker import gateway_of_bridge  # noqa: E402
from osmo_run.backends.harbor.relay import is_loopback, reach_from_trials  # noqa: E402
from osmo_run.errors import EnvironmentNotReady  # noqa: E402
from osmo_run.sdk.context import LLMEndpoint  # noqa: E402
from tests.harbor.conftest import FakeModel, harbor_spec, run_harbor  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


def _fresh_bridge() -> dict[str, Any]:
    (network,) = json.loads((FIXTURES / "fresh-engine-bridge.json").read_text())
    assert network["IPAM"]["Config"] == [{"Subnet": "172.17.0.0/16"}]  # no gateway
    return network


def _unknown_interface(name: str) -> str | None:
    return None


def test_a_fresh_engine_without_a_recorded_gateway_still_gives_the_bridge_address() -> None:
    network = _fresh_bridge()
    assert gateway_of_bridge(network, lambda name: {"docker0": "172.17.0.9"}.get(name)) == (
        "172.17.0.9"  # the bridge interface's own address comes first
    )
    assert gateway_of_bridge(network, _unknown_interface) == "172.17.0.1"  # Docker's default


def test_a_recorded_gateway_is_used_as_it_is() -> None:
    network = _fresh_bridge()
    network["IPAM"]["Config"] = [{"Subnet": "10.9.0.0/24", "Gateway": "10.9.0.5"}]
    assert gateway_of_bridge(network, lambda name: "172.17.0.9") == "10.9.0.5"


def test_a_bridge_without_any_ipv4_address_is_refused_in_one_line() -> None:
    network = _fresh_bridge()
    network["IPAM"]["Config"] = []
    with pytest.raises(EnvironmentNotReady, match="records no IPv4 gateway or subnet"):
        gateway_of_bridge(network, _unknown_interface)


def test_the_relay_never_listens_on_every_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_gateway() -> str:
        return ""

    monkeypatch.setattr(docker_ops, "bridge_gateway", no_gateway)
    llm = LLMEndpoint(base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(EnvironmentNotReady, match="is not one address"):
        asyncio.run(reach_from_trials(llm, local_docker=True))


@pytest.mark.docker
def test_the_engine_here_gives_an_address_of_this_host_that_the_relay_can_listen_on() -> None:
    async def main() -> str:
        llm = LLMEndpoint(base_url="http://127.0.0.1:9/v1", model="m")
        url, relay = await reach_from_trials(llm, local_docker=True)
        assert relay is not None
        await relay.close()
        assert url is not None
        return url

    url = asyncio.run(main())
    assert url.startswith("http://") and not url.startswith("http://:"), url


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("host", ["0.0.0.0", "localhost"])
def test_a_model_served_on_every_interface_is_reached_from_trials(
    tmp_path: Path, fake_model: FakeModel, host: str
) -> None:
    """``base_url: http://0.0.0.0:PORT`` (what a server listening on every interface
    prints) means this machine, as it does for ``osmo-run local``: it is relayed into the
    trials like loopback, and the row gets the model's answer."""
    base_url = fake_model.base_url.replace("127.0.0.1", host)
    spec = harbor_spec(llm={"base_url": base_url, "model": f"model-{host}"})
    rows = [
        {
            "id": "m",
            "prompt": "6 * 7?",
            "label": "42",
            "metadata": {"workflow": "key", "chat": True},
        }
    ]
    done = run_harbor(tmp_path, rows, spec)
    assert done.returncode == 0, done.stdout + done.stderr
    row = done.rows["m"]
    assert (row["status"], row["reward"]) == ("success", 1.0), row["error_message"]
    assert any(request["model"] == f"model-{host}" for request in fake_model.requests)


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://0.0.0.0:8000/v1", True),
        ("http://[::]:8000/v1", True),
        ("http://127.0.0.2:8000/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://localhost/v1", True),
        ("http://10.0.0.5:8000/v1", False),
        ("https://api.example.invalid/v1", False),
        ("http://0.0.0.0.example.invalid/v1", False),
    ],
)
def test_what_counts_as_this_machine(url: str, local: bool) -> None:
    assert is_loopback(url) is local
