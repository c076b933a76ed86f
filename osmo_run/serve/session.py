"""One serving run: the runner of ``osmo-run local`` fed by HTTP instead of a dataset.

The rows go through the same :class:`~osmo_run.run.executing.runner.Runner` (backend, retries,
breaker, display, results file) as every run; the served rollouts
(:class:`~osmo_run.serve.rollouts.ServedRollouts`) are its async source of work items and
learn each result from its ``on_recorded`` hook. The HTTP server (uvicorn) runs on the
same event loop.

Stopping: the first SIGINT/SIGTERM refuses new submissions (503), cancels the queued
rollouts, gives those in flight ``shutdown_grace_sec`` to finish and then cancels them
(all recorded), and stops; a second one quits at once. When the breaker stops the runner,
the server keeps answering reads and refuses submissions with the cause (503) until
stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmo_run.backends.base import ExecutionBackend
from osmo_run.errors import ExitCode, InputError
from osmo_run.run.controls.breaker import Breaker
from osmo_run.run.controls.interrupts import interrupts_handled
from osmo_run.run.controls.retry import RetryPolicy
from osmo_run.run.executing.display import Display, PlainDisplay
from osmo_run.run.executing.runner import Runner, WorkItem
from osmo_run.run.writing.output import OutputWriter
from osmo_run.run.writing.records import record_dict, record_line
from osmo_run.run.writing.runfiles import RunPaths, iter_records_at, repair_torn_tail
from osmo_run.run.writing.text import one_line
from osmo_run.run.writing.turns import line_rollout_id
from osmo_run.sdk.model_layer import ModelLayer, use_model_layer
from osmo_run.sdk.rollout import run_to_completion
from osmo_run.sdk.types import ErrorCategory, ExecutionResult, LLMUsage, RolloutStatus
from osmo_run.serve.app import create_app
from osmo_run.serve.backend import ServedBackend, ServedWriter
from osmo_run.serve.rollouts import KeptAt, ServedRollouts, ServeSettings

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
SHUTDOWN_MESSAGE = "rollout server is shutting down"


@dataclass
class ServeOptions:
    """Where and how to listen, beyond what the runner needs."""

    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    shutdown_grace_sec: float = 10.0
    max_body_bytes: int = 16 * 1024 * 1024


def check_binding(host: str, api_key: str | None) -> None:
    """Refuse, in one line, to listen beyond the loopback interface without a key."""
    if host not in LOOPBACK_HOSTS and not api_key:
        raise InputError(
            f"--host {host} listens beyond this machine: give the server a key with "
            "--api-key-env NAME (trainers send it as Authorization: Bearer <key>)"
        )


def existing_results(path: Path, resume: bool, overwrite: bool) -> int:
    """How many lines ``path`` holds once the flags are applied: refuses (one line) a run
    with results or admissions unless ``--resume`` or ``--overwrite``; removes both for
    ``--overwrite``."""
    if path.is_dir():
        raise InputError(f"{path}: --output names a directory; give a .jsonl file")
    admitted = RunPaths(path).admitted
    held = [p for p in (path, admitted) if p.is_file() and p.stat().st_size > 0]
    if not held:
        return 0
    if overwrite:
        for old in held:
            old.unlink()
        return 0
    if not resume:
        raise InputError(
            f"{held[0]} holds an earlier serving run: pass --resume to serve its results "
            "again and finish what it admitted (lease tokens stay valid), or --overwrite "
            "to start afresh"
        )
    if not path.is_file():
        return 0
    repair_torn_tail(path)
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


class ServeRun:
    """The pieces of one serving run, wired together (see the module docstring)."""

    def __init__(
        self,
        backend: ExecutionBackend,
        results: Path,
        settings: ServeSettings,
        options: ServeOptions,
        display: Display,
        *,
        secrets: tuple[str, ...] = (),
        retry: RetryPolicy | None = None,
        breaker: Breaker | None = None,
        first_index: int = 0,
        layer: ModelLayer | None = None,
    ) -> None:
        self.layer = layer
        """The model layer every rollout's calls go through (a limit per endpoint, the
        spec's budget); made current when :meth:`serve` starts."""
        self.kept_usage = LLMUsage()
        self.kept_grader_usage = LLMUsage()
        """What the rollouts :meth:`restore` kept spent (``--resume``: the budget counts it)."""
        self.writer = ServedWriter(results, secrets)
        self.journal = OutputWriter(RunPaths(results).admitted)
        self.rollouts = ServedRollouts(
            settings, self.writer.add_secret, first_index=first_index, journal=self._journal
        )
        self.rollouts.breaker = breaker
        self.rollouts.on_admitted = display.admitted
        self.writer.rollouts = self.rollouts
        self.rollouts.lines = self.writer
        self.backend = ServedBackend(backend, self.rollouts)
        self.display = display
        self.options = options
        self.breaker = breaker
        kwargs: dict[str, Any] = {} if retry is None else {"retry": retry}
        self.runner = Runner(
            self.backend,
            self.writer,
            display,
            breaker=breaker,
            on_recorded=self.rollouts.recorded,
            **kwargs,
        )
        self.rollouts.runner = self.runner
        self.app = create_app(
            self.rollouts,
            backend.health,
            api_key=options.api_key,
            max_body_bytes=options.max_body_bytes,
        )
        self.url: str | None = None
        self._stopping: asyncio.Event | None = None
        self.stop_reason: str | None = None

    def _journal(self, admitted: dict[str, Any]) -> None:
        """Append one admission (the run's secrets masked) before it is answered."""
        self.journal.write(record_line(self.writer.mask_values(admitted)))

    def restore(self, results: Path) -> tuple[int, int]:
        """``--resume``: serve again the results ``results`` holds, and queue again the
        rollouts admitted before that never finished; ``(finished, queued again)``."""
        finished = 0
        # the answers are read back from this run's files when they are these, not held
        in_place = results.resolve() == self.writer.path.resolve()
        if results.is_file():
            for line_at, line_len, record in iter_records_at(results):
                where = KeptAt(line_at, line_len) if in_place else None
                if record.get("served") and self.rollouts.restore(record, where):
                    finished += 1
                    for kept, spent in (
                        (self.kept_usage, record.get("usage")),
                        (self.kept_grader_usage, record.get("grader_usage")),
                    ):
                        if (usage := LLMUsage.from_dict(spent)) is not None:
                            kept.merge(usage)
        turns = RunPaths(results).turns
        if finished and self.rollouts.settings.capture_tokens and turns.is_file():
            with open(turns, "rb") as handle:  # answered again with the turns they had
                offset = 0
                for raw in handle:
                    at, offset = offset, offset + len(raw)
                    rollout_id = line_rollout_id(raw)
                    if rollout_id is not None and self.rollouts.restored(rollout_id):
                        with contextlib.suppress(ValueError, KeyError, TypeError):
                            turns_of = json.loads(raw)["turns"]
                            place = (at, len(raw)) if in_place else None
                            self.rollouts.restore_turns(rollout_id, turns_of, place)
        again = 0
        admitted = RunPaths(results).admitted
        if admitted.is_file():
            repair_torn_tail(admitted)  # an admission cut short was never answered
            with open(admitted, "rb") as handle:
                for raw in handle:
                    try:
                        entry = json.loads(raw)
                    except ValueError:
                        continue
                    if isinstance(entry, dict) and self.rollouts.readmit(entry):
                        again += 1
        return finished, again

    def stop(self, reason: str = "stopped") -> None:
        """Begin the graceful stop (thread-safe only through the loop)."""
        self.stop_reason = self.stop_reason or reason
        self.rollouts.refuse_new(SHUTDOWN_MESSAGE)
        if self._stopping is not None:
            self._stopping.set()

    async def serve(self, ready: asyncio.Future[str] | None = None) -> ExitCode:
        """Serve until :meth:`stop`; the exit code. ``ready`` receives the base URL."""
        import uvicorn

        self._stopping = asyncio.Event()
        if self.stop_reason is not None:
            self._stopping.set()
        if self.layer is not None:
            use_model_layer(self.layer)  # this task's context: the runner's tasks inherit it
            self.layer.show_on(self.display, self.writer.mask)
        config = uvicorn.Config(
            self.app,
            host=self.options.host,
            port=self.options.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            # trainers keep connections across long-polls and 429 back-offs: uvicorn's 5 s
            # would close idle ones under a client that is about to reuse them
            timeout_keep_alive=max(65, int(self.rollouts.settings.result_wait_sec) + 35),
        )
        server = _QuietServer(config)
        listening = _listen(self.options.host, self.options.port)
        serving = asyncio.create_task(server.serve(sockets=[listening]))
        sweeper = asyncio.create_task(self.rollouts.sweep_forever())
        try:
            await self.backend.prepare()
            while not server.started:
                if serving.done():
                    raise InputError(
                        f"cannot serve on {self.options.host}:{self.options.port} "
                        "(uvicorn stopped at start-up)"
                    )
                await asyncio.sleep(0.01)
            self.url = _bound_url(server, self.options.host)
            if ready is not None and not ready.done():
                ready.set_result(self.url)
            if self._budget_spent():  # --resume of a run that spent it
                self._stop_admitting()
            running = asyncio.create_task(self.runner.run(self.rollouts))
            stopping = asyncio.create_task(self._stopping.wait())
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if running.done() and not self._stopping.is_set():
                running.result()  # a fatal error of the runner (a full disk) raises here
                self._stop_admitting()
                await self._stopping.wait()
            await self._wind_down(running)
        finally:
            stopping_task = [t for t in (sweeper,) if not t.done()]
            for task in stopping_task:
                task.cancel()
            server.should_exit = True
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(serving, 5)
            self.writer.close()
            self.journal.close()
            await self.backend.aclose()
            self.display.stop()
        if self._tripped():
            return ExitCode.SYSTEMIC_FAILURE
        return ExitCode.BUDGET_SPENT if self._budget_spent() else ExitCode.INTERRUPTED

    def _tripped(self) -> bool:
        return self.breaker is not None and self.breaker.tripped is not None

    def _budget_spent(self) -> bool:
        return self.layer is not None and self.layer.budget_spent

    def _stop_admitting(self) -> None:
        """The runner stopped on its own (the breaker, a spent budget) or cannot run a
        rollout (a budget an earlier invocation spent): refuse submissions with the cause,
        record what it never started as cancelled."""
        trip = self.breaker.tripped if self.breaker is not None else None
        budget = None if self.layer is None else self.layer.budget
        cause = (
            f"the breaker stopped this server: {trip.after} rollouts in a row failed with "
            f"{trip.category} ({trip.message}); fix the cause and restart it"
            if trip is not None
            else f"budget: {budget.reached()}; no further model call is sent: restart the "
            "server with a larger budget (--resume keeps what finished)"
            if budget is not None and budget.spent
            else "the runner stopped; restart the server"
        )
        self.rollouts.refuse_new(cause)
        self.display.message(cause)
        self._record_unrun(self.rollouts.unstarted(), "not started: " + cause)

    def _record_unrun(self, items: list[WorkItem], reason: str) -> None:
        """Write rollouts the runner never took as cancelled, as the runner writes a line."""
        for item in items:
            result = self.rollouts.gate_reason(item.rollout_id) or reason
            cancelled = ExecutionResult.failure(
                item.rollout_id, ErrorCategory.CANCELLED, result, None
            )
            record = record_dict(
                item.row.row_id,
                item.row.index,
                item.row.line,
                cancelled,
                0,
                1,
                None,
                item.safe_name,
            )
            record = self.writer.mask_record(record)
            record.pop("error_detail", None)
            # the writer's line, as the runner's: `served` and `lease_sha256` let --resume
            # answer it to its token instead of running it again
            self.writer.write(self.writer.record_line(record))
            self.rollouts.recorded(item, cancelled, record)

    async def _wind_down(self, running: asyncio.Task[Any]) -> None:
        """Refuse submissions, cancel the queue, give the rollouts in flight their grace,
        then cancel them; every one is recorded."""
        self.rollouts.refuse_new(SHUTDOWN_MESSAGE)
        cancelled = self.rollouts.cancel_queued("the server stopped before this rollout started")
        self.rollouts.end()
        in_flight = self.rollouts.running
        if not running.done():
            _, pending = await asyncio.wait({running}, timeout=self.options.shutdown_grace_sec)
            if pending:
                self.runner.interrupt()
            await running
        left = self.rollouts.unstarted()
        if left:
            self._record_unrun(left, "the server stopped before this rollout started")
        self.display.message(
            f"osmo-run serve: {self.stop_reason or 'stopped'}: {cancelled} queued rollouts "
            f"cancelled, {in_flight} in flight given {self.options.shutdown_grace_sec:g}s "
            f"(the rest cancelled); results in {self.writer.path}"
        )


class ServedPlainDisplay(PlainDisplay):
    """``--display plain`` for a server: one line per finished rollout (a trainer's rollouts
    arrive without end; a progress line alone would not say which finished), failures as
    ``osmo-run local`` prints them."""

    def row_finished(self, result: ExecutionResult) -> None:
        if result.status is RolloutStatus.SUCCESS:
            reward = "-" if result.reward is None else f"{result.reward:g}"
            skipped = f" (not graded: {result.grader_skipped})" if result.grader_skipped else ""
            self._print(
                f"SUCCESS row {one_line(result.rollout_id)} reward {reward} "
                f"in {result.timings.total_sec:.2f}s{skipped}"
            )
        super().row_finished(result)


class _QuietServer:
    """uvicorn's server without its own signal handling: the run's handlers stop it."""

    def __new__(cls, config: Any) -> Any:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        return Server(config)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` whose connections send small answers at once
    (``TCP_NODELAY``); one line (:class:`InputError`) when the address is taken or cannot
    be used."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        created = socket.create_server((host, port), family=family, backlog=2048)
        # create_server leaves the socket's proto 0, and asyncio sets TCP_NODELAY only on
        # connections whose proto is IPPROTO_TCP (accepted ones inherit the listener's):
        # without it, Nagle held back the body uvicorn writes after the headers until the
        # client's delayed ACK, ~40 ms added to every request on a kept-alive connection.
        return socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, created.detach())
    except (OSError, OverflowError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"--host {host} --port {port}: cannot listen there: {reason}") from None


def _bound_url(server: Any, host: str) -> str:
    """The base URL the server listens on (the port the OS chose for ``--port 0``)."""
    for listener in getattr(server, "servers", []):
        for sock in listener.sockets:
            port = sock.getsockname()[1]
            shown = f"[{host}]" if ":" in host else host
            return f"http://{shown}:{port}"
    return f"http://{host}"


def run_serving(run: ServeRun) -> ExitCode:
    """Serve in this thread until SIGINT/SIGTERM (a second one quits at once); the exit
    code."""

    async def main() -> ExitCode:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[str] = loop.create_future()

        def announce(done: asyncio.Future[str]) -> None:
            if not done.cancelled() and done.exception() is None:
                print(
                    f"osmo-run serve: listening on {done.result()} · results {run.writer.path}",
                    file=sys.stderr,
                    flush=True,
                )

        ready.add_done_callback(announce)
        with interrupts_handled(loop, lambda: run.stop("interrupted"), run.display.stop):
            return await run.serve(ready)

    return run_to_completion(main())
