"""A client for trainers, in osmo-run's own words: submit a batch of rollouts to a rollout
server (``osmo-run serve``, or osmosis-ai's own) and take their results as they finish.

    async with ServeClient("http://127.0.0.1:8080") as client:
        group = [Rollout(f"step3-q7-{k}", prompt, policy_url, label=answer) for k in range(8)]
        async for result in client.run_batch(group):
            rewards[result.rollout_id] = result.reward

- **Back-pressure.** A ``429`` is waited out for its ``Retry-After`` (the server's drain
  rate, for osmo-run), then the submission is sent again; at most ``max_open`` requests
  are open at once.
- **Reconnection.** A result read that finds no server (refused connection, a reset, a
  gateway's ``502``-``504``) is retried with the same lease token for up to
  ``reconnect_sec``: a server restarted with ``--resume`` answers it.
- **No hang.** A server that takes a request and never answers (a stopped process, a
  network that drops packets) is an error after ``read_timeout_sec`` (a result read:
  after that beyond the long-poll the server announced, then ``reconnect_sec`` of asking
  again), never a trainer waiting forever.
- **Sync.** :func:`run_batch_sync` for a trainer loop that is not async.

Uses aiohttp (a dependency of osmo-run); nothing here needs the server to be osmo-run.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

LEASE_HEADER = "X-Osmosis-Rollout-Lease"
TERMINAL = frozenset({"success", "failure", "cancelled"})
RETRY_AFTER_BOUNDS = (0.05, 60.0)


class RolloutServerError(Exception):
    """The server refused a request for good (not a 429): its status and one-line detail."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


@dataclass
class Rollout:
    """One rollout to submit: the prompt, the trainer's model endpoint for it, and what the
    grader needs."""

    rollout_id: str
    messages: list[dict[str, Any]]
    chat_completions_url: str
    llm_api_key: str | None = field(default=None, repr=False)
    label: str | None = None
    metadata: dict[str, Any] | None = None
    grade: bool = True
    agent_timeout_sec: float | None = None
    grader_timeout_sec: float | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "rollout_id": self.rollout_id,
            "initial_messages": self.messages,
            "chat_completions_url": self.chat_completions_url,
            "label": self.label,
            "metadata": self.metadata,
            "grade": self.grade,
            "agent_timeout_sec": self.agent_timeout_sec,
            "grader_timeout_sec": self.grader_timeout_sec,
        }
        if self.llm_api_key is not None:
            body["llm_api_key"] = self.llm_api_key
        return body


@dataclass
class RolloutResult:
    """A finished rollout as the server answered it."""

    rollout_id: str
    status: str
    reward: float | None
    messages: list[dict[str, Any]]
    error_message: str | None
    error_category: str | None
    answer: dict[str, Any]
    """The whole answer (``sample.metrics``, ``sample.extra_fields``...)."""
    turns: list[dict[str, Any]] | None = None
    """The rollout's captured model calls in order, when the server's spec sets
    ``llm.capture: tokens`` (``model``, ``finish_reason``, ``messages``,
    ``prompt_token_ids``, ``completion_token_ids``, ``logprobs`` each); else ``None``."""

    @property
    def ok(self) -> bool:
        return self.status == "success"

    @classmethod
    def from_answer(cls, answer: dict[str, Any]) -> RolloutResult:
        sample = answer.get("sample") or {}
        return cls(
            rollout_id=str(answer.get("rollout_id")),
            status=str(answer.get("status")),
            reward=sample.get("reward"),
            messages=list(sample.get("messages") or []),
            error_message=answer.get("err_message"),
            error_category=answer.get("err_category"),
            answer=answer,
            turns=list(answer["turns"]) if isinstance(answer.get("turns"), list) else None,
        )


def _retry_after(value: str | None, default: float = 1.0) -> float:
    try:
        seconds = float(value) if value is not None else default
    except ValueError:
        seconds = default
    if not math.isfinite(seconds):
        seconds = default
    low, high = RETRY_AFTER_BOUNDS
    return min(max(seconds, low), high)


class ServeClient:
    """Talks to the rollout server at ``url`` (see the module docstring). ``api_key`` is the
    server's key, if it has one (never a rollout's model key)."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        max_open: int = 256,
        reconnect_sec: float = 120.0,
        admission_timeout_sec: float | None = None,
        read_timeout_sec: float = 60.0,
    ) -> None:
        import aiohttp

        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._open = asyncio.Semaphore(max_open)
        self._reconnect_sec = reconnect_sec
        self._admission_timeout_sec = admission_timeout_sec
        self._read_timeout_sec = read_timeout_sec
        self._timeout = aiohttp.ClientTimeout(sock_connect=10, sock_read=read_timeout_sec)
        self._poll_timeout = self._timeout
        """A result read waits the server's long-poll (``result_wait_timeout_sec`` of its
        admissions) on top of ``read_timeout_sec``."""
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_open), timeout=self._timeout
        )

    async def __aenter__(self) -> ServeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._session.close()

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        poll: bool = False,
    ) -> tuple[int, dict[str, str], Any]:
        """One request: ``(status, headers, JSON body)``. Raises ``TimeoutError`` (no answer
        in time) or ``aiohttp.ClientError`` (no connection)."""
        async with (
            self._open,
            self._session.request(
                method,
                self.url + path,
                json=body,
                headers={**self._headers, **(headers or {})},
                timeout=self._poll_timeout if poll else self._timeout,
            ) as response,
        ):
            try:
                data = await response.json(content_type=None)
            except ValueError:
                data = {"detail": (await response.text())[:200]}
            return response.status, dict(response.headers), data

    async def _answer(self, method: str, path: str, body: Any) -> tuple[int, dict[str, str], Any]:
        """:meth:`_call`, with no answer raised as :class:`RolloutServerError` (status 0)."""
        import aiohttp

        try:
            return await self._call(method, path, body)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise RolloutServerError(
                0, f"no answer from {self.url}{path} ({type(exc).__name__}: {exc})"
            ) from None

    def _learn_result_wait(self, seconds: Any) -> None:
        """Let result reads wait ``seconds`` (the server's long-poll) beyond the read timeout."""
        import aiohttp

        if isinstance(seconds, int | float) and math.isfinite(seconds) and seconds > 0:
            wait = self._read_timeout_sec + float(seconds)
            if self._poll_timeout.sock_read != wait:
                self._poll_timeout = aiohttp.ClientTimeout(sock_connect=10, sock_read=wait)

    async def submit(self, rollout: Rollout) -> str:
        """Admit ``rollout``; its lease token. Waits out 429s (their ``Retry-After``) until
        ``admission_timeout_sec``; raises :class:`RolloutServerError` for any other
        refusal (409, 422, 503...), and with status 0 when no answer came within
        ``read_timeout_sec`` or no connection could be made."""
        deadline = (
            None
            if self._admission_timeout_sec is None
            else time.monotonic() + self._admission_timeout_sec
        )
        while True:
            status, headers, data = await self._answer("POST", "/rollout", rollout.body())
            if status == 202:
                self._learn_result_wait(data.get("result_wait_timeout_sec"))
                return str(data["polling_lease_token"])
            if status != 429:
                raise RolloutServerError(status, _detail(data))
            wait = _retry_after(headers.get("Retry-After"))
            if deadline is not None and time.monotonic() + wait > deadline:
                raise RolloutServerError(429, "admission timed out: the queue stayed full")
            await asyncio.sleep(wait)

    async def result(self, rollout_id: str, token: str) -> RolloutResult:
        """Long-poll ``rollout_id`` until it finishes. A server that is not there (restarting)
        is asked again with the same token for up to ``reconnect_sec``."""
        import aiohttp

        lost_since: float | None = None
        delay = 0.1
        while True:
            try:
                status, _, data = await self._call(
                    "GET", f"/rollout/{rollout_id}/result", headers={LEASE_HEADER: token}, poll=True
                )
            except (TimeoutError, aiohttp.ClientConnectionError) as exc:
                status, data = 0, {"detail": f"{type(exc).__name__}: {exc}"}
            if status == 200:
                if data.get("status") in TERMINAL:
                    return RolloutResult.from_answer(data)
                lost_since, delay = None, 0.1
                continue
            if status not in (0, 502, 503, 504):
                raise RolloutServerError(status, _detail(data))
            now = time.monotonic()
            lost_since = now if lost_since is None else lost_since
            if now - lost_since > self._reconnect_sec:
                raise RolloutServerError(status, f"server unreachable: {_detail(data)}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def run(self, rollout: Rollout) -> RolloutResult:
        """Submit one rollout and wait for its result."""
        return await self.result(rollout.rollout_id, await self.submit(rollout))

    async def run_batch(self, rollouts: Iterable[Rollout]) -> AsyncIterator[RolloutResult]:
        """Submit every rollout (as the server admits them) and yield each result as it
        finishes, in finishing order. A refused submission raises when its turn comes."""
        tasks = [asyncio.ensure_future(self.run(rollout)) for rollout in rollouts]
        try:
            for finished in asyncio.as_completed(tasks):
                yield await finished
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def cancel(
        self, ids: list[str] | None = None, prefix: str | None = None, every: bool = False
    ) -> dict[str, str]:
        """Cancel by ids, id prefix, or every rollout; each id's disposition."""
        selector: dict[str, Any] = (
            {"all": True} if every else {"prefix": prefix} if prefix is not None else {"ids": ids}
        )
        status, _, data = await self._answer("POST", "/rollout/cancel", selector)
        if status != 200:
            raise RolloutServerError(status, _detail(data))
        return dict(data["dispositions"])


def _detail(data: Any) -> str:
    if isinstance(data, dict):
        return str(data.get("detail", data))[:300]
    return str(data)[:300]


def run_batch_sync(url: str, rollouts: Iterable[Rollout], **options: Any) -> list[RolloutResult]:
    """:meth:`ServeClient.run_batch` for code that is not async: every result, in finishing
    order. ``options`` go to :class:`ServeClient`."""

    async def collect() -> list[RolloutResult]:
        async with ServeClient(url, **options) as client:
            return [result async for result in client.run_batch(list(rollouts))]

    return asyncio.run(collect())
