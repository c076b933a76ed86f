"""``osmo-run serve --task-dir`` end to end in Docker (osmo-run issue 23): a trainer submits
rollouts over HTTP, each with its own model endpoint on this machine's loopback and its own
key; every rollout runs in its own Harbor trial, calls its endpoint (through the relay) with
its key, and comes back with a reward; the results file has them, and no key is in any file
of the run directory (trials kept) or in what the server printed."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from osmo_run.client import Rollout, run_batch_sync
from tests.harbor.conftest import (
    OSMO_RUN,
    FakeModel,
    cli_env,
    harbor_spec,
    read_rows,
    run_id_of_rows,
    serving,
    wait_for_no_labelled_containers,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

KEYS = {
    "alpha": "sk-trainer-alpha-4b1f9c",
    "beta": "sk-trainer-beta-77e2d0",
    "gamma": "sk-trainer-gamma-0a5c3e",
}
"""Each rollout's endpoint answers its name, and wants its key."""
SPEC_KEY = "sk-the-spec-key-9d0e61"
"""The spec's own llm key: no served rollout may get it."""


@pytest.fixture
def endpoints() -> Iterator[dict[str, FakeModel]]:
    """One chat-completions stub per rollout, answering its name."""
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(serving(FakeModel(reply=name))) for name in KEYS}


@dataclass
class Served:
    url: str
    process: subprocess.Popen[str]
    printed: list[str]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """``osmo-run serve`` with Harbor trials of the calculator task, trials kept; stopped
    with SIGTERM after the test."""
    spec = tmp_path / "spec.yaml"
    # generous deadlines: a loaded machine starts containers slowly
    spec.write_text(
        json.dumps(
            harbor_spec(
                timeouts={"agent_sec": 120, "grader_sec": 120},
                # the run's own endpoint and key, which served rollouts never use
                llm={"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "SPEC"},
            )
        )
    )
    command = [
        str(OSMO_RUN), "serve", "--spec", str(spec), "--backend", "harbor", "--keep-trials",
        "--port", "0",
        "--display", "plain", "--output", str(tmp_path / "out" / "results.jsonl"),
        "--shutdown-grace", "5",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=cli_env(SPEC=SPEC_KEY),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    printed: list[str] = []
    listening = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            printed.append(line)
            if "listening on" in line:
                listening.set()
        listening.set()  # it ended: the test reads why

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # the trial image is built before the server listens
        assert listening.wait(900), "the server never listened"
        match = re.search(r"listening on (http://\S+)", "".join(printed))
        assert match, "".join(printed)
        yield Served(match.group(1), process, printed)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)
        reader.join(30)
        if process.stderr is not None:
            process.stderr.close()


def _files_holding(root: Path, secrets: list[str]) -> list[str]:
    return [
        str(path)
        for path in root.rglob("*")
        if path.is_file() and any(s.encode() in path.read_bytes() for s in secrets)
    ]


def test_each_served_rollout_runs_in_a_trial_with_its_own_endpoint_and_key(
    tmp_path: Path, endpoints: dict[str, FakeModel], served: Served
) -> None:
    def rollout(rollout_id: str, endpoint: str, key: str | None) -> Rollout:
        return Rollout(
            rollout_id,
            [{"role": "user", "content": f"who are you? ({rollout_id})"}],
            endpoints[endpoint].base_url,
            llm_api_key=key,
            label=endpoint,  # the grader gives 1.0 when the answer is the label
            metadata={"workflow": "key", "chat": True},
        )

    rollouts = [rollout(f"r-{name}", name, key) for name, key in KEYS.items()]
    rollouts.append(rollout("r-keyless", "alpha", None))  # alpha's endpoint, no key
    results = {r.rollout_id: r for r in run_batch_sync(served.url, rollouts)}

    expected_keys = {f"r-{name}": key for name, key in KEYS.items()} | {"r-keyless": None}
    for rollout_id in expected_keys:
        result = results[rollout_id]
        assert (result.status, result.reward) == ("success", 1.0), result.answer
    # each endpoint saw its rollouts' calls only, each with that rollout's key (none
    # for the keyless one, never the spec's)
    for name, endpoint in endpoints.items():
        callers = {call["prompt"].rsplit("(", 1)[1].rstrip(")") for call in endpoint.requests}
        assert callers == ({"r-alpha", "r-keyless"} if name == "alpha" else {f"r-{name}"})
        for call in endpoint.requests:
            key = expected_keys[call["prompt"].rsplit("(", 1)[1].rstrip(")")]
            assert call["authorization"] == (None if key is None else f"Bearer {key}")

    run_dir = tmp_path / "out"
    rows = read_rows(run_dir / "results.jsonl")
    assert {i: (r["status"], r["reward"], r["served"]) for i, r in rows.items()} == {
        rollout_id: ("success", 1.0, True) for rollout_id in expected_keys
    }
    for rollout_id, key in expected_keys.items():
        assert rows[rollout_id]["sample"]["metrics"]["key_len"] == (len(key) if key else -1)
        kept = rows[rollout_id]["backend"]["trial_dir"]
        assert kept is not None and Path(kept).is_relative_to(run_dir / "trials")

    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(120) == 130
    secrets = [*KEYS.values(), SPEC_KEY]
    assert list((run_dir / "trials").iterdir()), "no trial directory was kept"
    assert _files_holding(run_dir, secrets) == []
    assert not [line for line in served.printed if any(s in line for s in secrets)]
    run_id = run_id_of_rows(rows)
    assert run_id is not None
    assert wait_for_no_labelled_containers(run_id) == []
