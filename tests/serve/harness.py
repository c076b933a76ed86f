"""A real ``osmo-run serve`` (uvicorn on a free port, the run's runner and results file) on
the test's own event loop, and an httpx client talking HTTP to it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from osmo_run.backends.local import LocalBackend
from osmo_run.run.controls.breaker import Breaker
from osmo_run.run.executing.display import Display, NullDisplay
from osmo_run.sdk.config import AgentWorkflowConfig, ConcurrencyConfig
from osmo_run.sdk.workflow import AgentWorkflow, Grader
from osmo_run.serve.rollouts import ServeSettings
from osmo_run.serve.session import ServeOptions, ServeRun
from tests.conftest import REPO
from tests.workflows import ScriptedGrader, ScriptedWorkflow

LEASE = "X-Osmosis-Rollout-Lease"


def body(rollout_id: str, **fields: Any) -> dict[str, Any]:
    """A ``POST /rollout`` body; ``metadata`` drives ScriptedWorkflow."""
    return {
        "rollout_id": rollout_id,
        "initial_messages": [{"role": "user", "content": fields.pop("content", "hello")}],
        "chat_completions_url": fields.pop("url", "http://127.0.0.1:9/v1"),
        "label": fields.pop("label", "hello"),
        **fields,
    }


@dataclass
class Server:
    client: httpx.AsyncClient
    run: ServeRun
    url: str
    results: Path
    task: asyncio.Task[Any] = field(repr=False)

    async def submit(self, rollout_id: str, **fields: Any) -> httpx.Response:
        return await self.client.post("/rollout", json=body(rollout_id, **fields))

    async def admitted(self, rollout_id: str, **fields: Any) -> str:
        """Submit; the lease token (asserts 202)."""
        response = await self.submit(rollout_id, **fields)
        assert response.status_code == 202, response.text
        token: str = response.json()["polling_lease_token"]
        return token

    async def poll(self, rollout_id: str, token: str) -> httpx.Response:
        return await self.client.get(f"/rollout/{rollout_id}/result", headers={LEASE: token})

    async def final(self, rollout_id: str, token: str, within: float = 20) -> dict[str, Any]:
        """Long-poll until the rollout's answer is terminal."""
        async with asyncio.timeout(within):
            while True:
                response = await self.poll(rollout_id, token)
                assert response.status_code == 200, response.text
                answer: dict[str, Any] = response.json()
                if answer["status"] in ("success", "failure", "cancelled"):
                    return answer

    async def cancel(self, **selector: Any) -> httpx.Response:
        return await self.client.post("/rollout/cancel", json=selector)

    def lines(self) -> list[dict[str, Any]]:
        if not self.results.is_file():
            return []
        return [json.loads(line) for line in self.results.read_text().splitlines()]

    async def recorded(self, count: int, within: float = 20) -> list[dict[str, Any]]:
        """The results lines, once there are ``count`` of them."""
        async with asyncio.timeout(within):
            while True:
                lines = self.lines()
                if len(lines) >= count:
                    return lines
                await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path,
    *,
    workflow: type[AgentWorkflow] | str = ScriptedWorkflow,
    grader: type[Grader] | str | None = ScriptedGrader,
    concurrency: int = 2,
    max_queued: int = 4,
    result_wait_sec: float = 5.0,
    lease_sec: float = 30.0,
    retention_sec: float = 900.0,
    api_key: str | None = None,
    breaker: int | None = None,
    isolation: str = "none",
    secrets: tuple[str, ...] = (),
    display: Display | None = None,
    results: Path | None = None,
    resume_from: Path | None = None,
    shutdown_grace_sec: float = 2.0,
    agent_timeout_sec: float | None = 30.0,
    max_body_bytes: int = 16 * 1024 * 1024,
    client_headers: dict[str, str] | None = None,
    capture_tokens: bool = False,
) -> AsyncIterator[Server]:
    """A serving run in ``tmp_path`` for the block; stopped (as on SIGTERM) after it."""
    config = AgentWorkflowConfig(concurrency=ConcurrencyConfig(max_concurrent=concurrency))
    backend = LocalBackend(
        workflow,
        config,
        grader,
        artifacts_root=tmp_path / "artifacts",
        isolation=isolation,
        code_dir=REPO,
    )
    path = results or tmp_path / "results.jsonl"
    first = 0
    if path.is_file():
        first = len(path.read_text().splitlines())
    run = ServeRun(
        backend,
        path,
        ServeSettings(
            max_queued=max_queued,
            result_wait_sec=result_wait_sec,
            lease_sec=lease_sec,
            retention_sec=retention_sec,
            agent_timeout_sec=agent_timeout_sec,
            capture_tokens=capture_tokens,
        ),
        ServeOptions(
            port=0,
            api_key=api_key,
            shutdown_grace_sec=shutdown_grace_sec,
            max_body_bytes=max_body_bytes,
        ),
        display or NullDisplay(),
        secrets=secrets,
        breaker=None if breaker is None else Breaker(breaker),
        first_index=first,
    )
    if resume_from is not None:
        run.restore(resume_from)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run.serve(ready))
    done, _ = await asyncio.wait({task, ready}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    url = ready.result()
    headers = client_headers or ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=headers) as client:
        server = Server(client, run, url, path, task)
        try:
            yield server
        finally:
            run.stop("test over")
            await asyncio.wait_for(task, 30)
