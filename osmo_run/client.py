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
- **Batches.** Against a server whose ``GET /health`` advertises ``batch`` (``osmo-run
  serve``), the submissions and result reads of concurrent calls are gathered into
  ``POST /rollouts`` and ``POST /rollouts/results`` requests (each at most the server's
  ``batch.max_items``): a handful of requests for a thousand rollouts in flight instead of
  two each. Against any other server (osmosis-ai's own), one request per submission and
  per result read. The guarantees above hold either way, per rollout.

Uses aiohttp (a dependency of osmo-run); nothing here needs the server to be osmo-run.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

LEASE_HEADER = "X-Osmosis-Rollout-Lease"
TERMINAL = frozenset({"success", "failure", "cancelled"})
RETRY_AFTER_BOUNDS = (0.05, 60.0)

POLL_SPACING_SEC_PER_ROLLOUT = 20e-6
"""A batched result read is sent at most every this many seconds per rollout being waited
for (20 ms for 1,000): the server checks every lease of a read, so reads sent as fast as
results come would cost it more than the requests they replace. A rollout finished waits
at most that long more for its read; the trainer's throughput is unchanged as long as
that is short beside a rollout's own duration."""


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


@dataclass(eq=False)
class _Submission:
    """A rollout waiting for a batched submission: its caller awaits ``future`` (the
    lease token)."""

    rollout: Rollout
    future: asyncio.Future[str]
    deadline: float | None


@dataclass(eq=False)
class _Watch:
    """A rollout whose result is awaited through batched reads, by every caller in
    ``futures``."""

    rollout_id: str
    token: str
    futures: list[asyncio.Future[RolloutResult]] = field(default_factory=list)

    def abandoned(self) -> bool:
        return all(future.done() for future in self.futures)

    def resolve(self, result: RolloutResult) -> None:
        for future in self.futures:
            if not future.done():
                future.set_result(result)

    def fail(self, error: RolloutServerError) -> None:
        for future in self.futures:  # an exception of its own each: raised in each caller
            if not future.done():
                future.set_exception(RolloutServerError(error.status, error.detail))


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
    server's key, if it has one (never a rollout's model key). ``batch=False`` keeps to one
    request per submission and per result read even where the server has batch routes."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        max_open: int = 256,
        reconnect_sec: float = 120.0,
        admission_timeout_sec: float | None = None,
        read_timeout_sec: float = 60.0,
        batch: bool = True,
    ) -> None:
        import aiohttp

        self._batch_wanted = batch
        self._batch_max: int | None = None
        """The server's ``batch.max_items`` once learned; ``None``: one request a rollout."""
        self._probed = False
        self._probe: asyncio.Future[None] | None = None
        self._to_submit: deque[_Submission] = deque()
        self._submitter: asyncio.Task[None] | None = None
        self._watches: dict[str, _Watch] = {}
        """Every rollout awaited through batched reads, by id."""
        self._unpolled: dict[str, _Watch] = {}
        """Those of them no read in flight asks for, oldest first."""
        self._poller: asyncio.Task[None] | None = None
        self._poll_due = asyncio.Event()
        self._lost_since: float | None = None
        self._closed = False
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
        """Stop the batching tasks (their callers' calls are cancelled) and close the
        connections."""
        self._closed = True
        for task in (self._probe, self._submitter, self._poller):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for submission in self._to_submit:
            submission.future.cancel()
        for watch in self._watches.values():
            for future in watch.futures:
                future.cancel()
        self._to_submit.clear()
        self._watches.clear()
        self._unpolled.clear()
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

    async def _batch_size(self) -> int | None:
        """How many items one batch request may carry (the server's ``batch.max_items``), or
        ``None`` for one request per rollout (the server has no batch routes, or
        ``batch=False``). Learned once from ``GET /health``; raises
        :class:`RolloutServerError` (status 0) while the server does not answer."""
        if not self._batch_wanted or self._probed:
            return self._batch_max
        if self._probe is None:  # one probe for every caller: they all go on in one turn
            self._probe = asyncio.ensure_future(self._probe_health())
        probe = self._probe
        try:
            await asyncio.shield(probe)
        finally:
            if self._probe is probe and probe.done():
                self._probe = None  # a failed probe is tried again by the next call
        return self._batch_max

    async def _probe_health(self) -> None:
        status, _, data = await self._answer("GET", "/health", None)
        batch = data.get("batch") if status == 200 and isinstance(data, dict) else None
        size = batch.get("max_items") if isinstance(batch, dict) else None
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            self._batch_max = size
        self._probed = True

    def _deadline(self) -> float | None:
        if self._admission_timeout_sec is None:
            return None
        return time.monotonic() + self._admission_timeout_sec

    async def submit(self, rollout: Rollout) -> str:
        """Admit ``rollout``; its lease token. Waits out 429s (their ``Retry-After``) until
        ``admission_timeout_sec``; raises :class:`RolloutServerError` for any other
        refusal (409, 422, 503...), and with status 0 when no answer came within
        ``read_timeout_sec`` or no connection could be made. Concurrent submissions go in
        one batch request where the server has them."""
        if await self._batch_size() is None:
            return await self._submit_one(rollout)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._queue_submission(_Submission(rollout, future, self._deadline()))
        return await future

    def _queue_submission(self, submission: _Submission) -> None:
        if self._closed or submission.future.done():
            return
        self._to_submit.append(submission)
        if self._submitter is None or self._submitter.done():
            self._submitter = asyncio.ensure_future(self._submit_batches())

    async def _submit_batches(self) -> None:
        """Send the waiting submissions, one batch request at a time: those made while one
        is in flight join the next."""
        size = self._batch_max or 1
        while self._to_submit:
            await asyncio.sleep(0)  # submissions made in this turn join the batch
            batch: list[_Submission] = []
            while self._to_submit and len(batch) < size:
                submission = self._to_submit.popleft()
                if not submission.future.done():  # its caller gave up
                    batch.append(submission)
            if batch:
                await self._submit_batch(batch)

    async def _submit_batch(self, batch: list[_Submission]) -> None:
        body = {"rollouts": [submission.rollout.body() for submission in batch]}
        try:
            status, _, data = await self._answer("POST", "/rollouts", body)
        except RolloutServerError as exc:
            error: RolloutServerError | None = exc
        except Exception as exc:  # a body JSON cannot encode (a set in metadata...)
            if len(batch) == 1:
                if not batch[0].future.done():
                    batch[0].future.set_exception(exc)
                return
            for submission in batch:  # alone, each: only its own caller gets the error
                await self._submit_batch([submission])
            return
        else:
            answers = data.get("answers") if isinstance(data, dict) else None
            error = None
            if status != 200 or not isinstance(answers, list) or len(answers) != len(batch):
                error = RolloutServerError(status, _detail(data))
        if error is not None:
            for submission in batch:  # an exception of its own each: raised in each caller
                if not submission.future.done():
                    submission.future.set_exception(RolloutServerError(error.status, error.detail))
            return
        assert isinstance(answers, list)
        self._learn_result_wait(data.get("result_wait_timeout_sec"))
        for submission, answer in zip(batch, answers, strict=True):
            self._admitted(submission, answer if isinstance(answer, dict) else {})

    def _admitted(self, submission: _Submission, answer: dict[str, Any]) -> None:
        """One item's answer: its token, a wait before it is sent again (429), or its
        refusal."""
        future = submission.future
        if future.done():
            return  # its caller gave up; an admitted rollout's lease lapses unread
        status = answer.get("status")
        token = answer.get("polling_lease_token")
        if status == 202 and isinstance(token, str):
            future.set_result(token)
            return
        if status != 429:
            code = status if isinstance(status, int) else 0
            future.set_exception(RolloutServerError(code, _detail(answer)))
            return
        wait = _retry_after(str(answer.get("retry_after_sec")))
        deadline = submission.deadline
        if deadline is not None and time.monotonic() + wait > deadline:
            future.set_exception(
                RolloutServerError(429, "admission timed out: the queue stayed full")
            )
            return
        asyncio.get_running_loop().call_later(wait, self._queue_submission, submission)

    async def _submit_one(self, rollout: Rollout) -> str:
        """:meth:`submit` through ``POST /rollout``."""
        deadline = self._deadline()
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
        is asked again with the same token for up to ``reconnect_sec``. Concurrent reads go
        in one batch request where the server has them."""
        try:
            size = await self._batch_size()
        except RolloutServerError:
            size = None  # no answer yet: the per-rollout read waits for the server
        watch = self._watches.get(rollout_id)
        if size is None or self._closed or (watch is not None and watch.token != token):
            return await self._result_one(rollout_id, token)
        if watch is None:
            watch = self._watches[rollout_id] = _Watch(rollout_id, token)
            self._unpolled[rollout_id] = watch
        future: asyncio.Future[RolloutResult] = asyncio.get_running_loop().create_future()
        watch.futures.append(future)
        self._poll_due.set()
        if self._poller is None or self._poller.done():
            self._poller = asyncio.ensure_future(self._poll_batches())
        return await future

    async def _poll_batches(self) -> None:
        """Read the awaited rollouts in batch requests until none is left: every rollout no
        read in flight asks for goes in the next one, spaced by
        :data:`POLL_SPACING_SEC_PER_ROLLOUT`."""
        size = self._batch_max or 1
        reads: set[asyncio.Task[None]] = set()
        last_sent = -math.inf
        try:
            while self._watches:
                if not self._unpolled:
                    self._poll_due.clear()
                    await self._poll_due.wait()
                    continue
                spacing = POLL_SPACING_SEC_PER_ROLLOUT * len(self._watches)
                await asyncio.sleep(max(last_sent + spacing - time.monotonic(), 0))
                leases: dict[str, str] = {}
                for rollout_id in list(self._unpolled)[:size]:
                    watch = self._unpolled.pop(rollout_id)
                    if watch.abandoned():
                        self._watches.pop(rollout_id, None)
                    else:
                        leases[rollout_id] = watch.token
                if leases:
                    last_sent = time.monotonic()
                    read = asyncio.ensure_future(self._read_batch(leases))
                    reads.add(read)
                    read.add_done_callback(reads.discard)
        except Exception as exc:  # a bug here must not leave callers waiting forever
            error = RolloutServerError(0, f"reading results failed: {type(exc).__name__}: {exc}")
            for watch in self._watches.values():
                watch.fail(error)
            self._watches.clear()
            self._unpolled.clear()
            raise
        finally:
            for read in list(reads):
                read.cancel()

    async def _read_batch(self, leases: dict[str, str]) -> None:
        """One ``POST /rollouts/results``: its finished rollouts and refusals settle their
        callers; the rest are asked for again (after a pause while the server is not
        there, for up to ``reconnect_sec``)."""
        import aiohttp

        try:
            status, _, data = await self._call(
                "POST", "/rollouts/results", {"leases": leases}, poll=True
            )
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            status, data = 0, {"detail": f"{type(exc).__name__}: {exc}"}
        except Exception as exc:  # what a per-rollout read would raise to its caller
            detail = f"reading results failed: {type(exc).__name__}: {exc}"
            self._settle(leases, RolloutServerError(0, detail))
            self._poll_due.set()
            return
        try:
            if status == 200 and isinstance(data, dict):
                self._lost_since = None
                try:
                    self._settle_read(data, leases)
                except Exception as exc:  # an answer of another shape
                    detail = f"unreadable answer: {type(exc).__name__}: {exc}"
                    self._settle(leases, RolloutServerError(200, detail))
            elif status in (0, 502, 503, 504):
                now = time.monotonic()
                self._lost_since = now if self._lost_since is None else self._lost_since
                lost_for = now - self._lost_since
                if lost_for > self._reconnect_sec:
                    error = RolloutServerError(status, f"server unreachable: {_detail(data)}")
                    self._settle(leases, error)
                    return
                await asyncio.sleep(min(0.1 + lost_for / 2, 2.0))
            else:
                self._settle(leases, RolloutServerError(status, _detail(data)))
                return
        finally:
            for rollout_id in leases:  # still awaited: into the next read
                watch = self._watches.get(rollout_id)
                if watch is not None and watch.token == leases[rollout_id]:
                    self._unpolled.setdefault(rollout_id, watch)
            self._poll_due.set()

    def _settle_read(self, data: dict[str, Any], leases: dict[str, str]) -> None:
        """Settle the callers of the read's finished and refused rollouts (only of those the
        read asked for: an answer naming another id is not taken for its result)."""

        def asked(item: Any) -> _Watch | None:
            rollout_id = str(item.get("rollout_id"))
            watch = self._watches.get(rollout_id)
            if rollout_id not in leases or watch is None or watch.token != leases[rollout_id]:
                return None
            return self._watches.pop(rollout_id)

        for answer in data.get("finished") or []:
            if isinstance(answer, dict) and answer.get("status") in TERMINAL:
                watch = asked(answer)
                if watch is not None:
                    watch.resolve(RolloutResult.from_answer(answer))
        for refusal in data.get("refused") or []:
            if isinstance(refusal, dict):
                watch = asked(refusal)
                if watch is not None:
                    code = refusal.get("status")
                    error = RolloutServerError(
                        code if isinstance(code, int) else 0, _detail(refusal)
                    )
                    watch.fail(error)

    def _settle(self, leases: dict[str, str], error: RolloutServerError) -> None:
        for rollout_id in leases:
            watch = self._watches.pop(rollout_id, None)
            if watch is not None:
                watch.fail(error)

    async def _result_one(self, rollout_id: str, token: str) -> RolloutResult:
        """:meth:`result` through ``GET /rollout/{id}/result``."""
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
