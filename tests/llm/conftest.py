"""Fixtures for the model tests: the embedded model, the stub endpoint, the extras.

``embedded_llm`` is the REAL embedded server (llama.cpp + SmolLM2-135M-Instruct), started
once per test session. Without the ``embedded`` extra and the model wheel the tests that
need it are skipped, naming the install script; in CI (``CI`` set) they fail instead.
``stub_model`` is the OpenAI-compatible stub of :mod:`tests.llm.stub_model`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from osmo_run.errors import BackendUnavailable
from osmo_run.llm.embedded import EmbeddedLLMServer, check_available
from osmo_run.sdk.context import LLMEndpoint
from tests.conftest import require_extra as require_extra  # one rule for every extra
from tests.llm.stub_model import StubModel, serve


def require_embedded() -> None:
    """Skip (fail in CI) unless the embedded server and its model are installed."""
    try:
        check_available()
    except BackendUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the embedded model: {exc}", pytrace=False)
        pytest.skip(f"{exc}")


@pytest.fixture(scope="session")
def embedded_llm() -> Iterator[LLMEndpoint]:
    """The real embedded model server's endpoint, for the whole session."""
    require_embedded()
    server = EmbeddedLLMServer(parallel=2)
    endpoint = server.start()
    yield endpoint
    server.stop()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, dead but not reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def stub_model() -> Iterator[StubModel]:
    """The shared OpenAI-compatible stub endpoint (tests/llm/stub_model.py), per test."""
    yield from serve(StubModel())
