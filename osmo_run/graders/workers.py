"""Worker processes for grading work that is unbounded in its input (math-verify, a user's
regex, JSON Schema), so that the grader deadline and Ctrl-C hold whatever the answer is.

A computation such as ``9**(9**9)`` or a backtracking regex holds the GIL for hours: in
this process it would stop the event loop, the deadlines and the signal handlers. In a
worker process it stops only that worker, which is killed (SIGKILL) when its caller is
cancelled (the grader deadline, an interrupted run) and replaced on the next call.

:data:`GRADER_WORKERS` is the process's pool: workers start when first needed, are reused
across rows and runs (one per row grading at once, at most :data:`WORKER_LIMIT`), are
forked from one process that has loaded what the graders need (a replacement costs a
fork, not an interpreter's start and math-verify's import), and die with this process: on
Linux the kernel kills them when it ends, however it ends (``PR_SET_PDEATHSIG``);
elsewhere an idle worker ends when its request pipe closes. A row process of
``--isolation process`` is killed at the deadline by its parent already, so there the
work runs in it (a worker process would cost each row a start).

Stdlib only: this runs wherever the graders run, Harbor trials included.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import importlib
import json
import os
import pickle
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from osmo_run.sdk.sandbox import SUPERVISED_ENV

T = TypeVar("T")

WORKER_LIMIT = max(4, os.cpu_count() or 1)
"""Workers alive at once; a call beyond them waits for one (within its grader deadline)."""

_BOOTSTRAP = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from osmo_run.graders.worker_process import zygote; "
    "zygote(int(sys.argv[2]), int(sys.argv[3]))"
)
"""The zygote's command: this process's import path (the user's code dir, a trial's
runtime), then the order loop on the socket it was handed."""

_ZYGOTE_REPLY_SEC = 120.0
"""How long an order to the zygote may take (a ``warm`` function loading math-verify on a
busy machine) before the zygote is deemed stuck and replaced."""


class WorkerDied(RuntimeError):
    """A worker process ended in the middle of a call (killed by the system, a crash in a
    C extension): the call has no result."""


class _WorkerGone(WorkerDied):
    """The worker had ended before the call was sent (it died idle): try another."""


@dataclass(eq=False)
class _Worker:
    """One worker process (forked by the zygote, so not our child) and the pipes to it."""

    pid: int
    requests: Connection
    replies: Connection
    pidfd: int | None = None
    """A handle that names this process even after its pid is reused (Linux)."""

    def call(self, function: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
        """``(True, result)`` or ``(False, exception)`` of ``function(*args)`` in the
        worker; :class:`WorkerDied` when the worker ends first. Blocking. A request that
        cannot be pickled raises here, leaving the worker usable."""
        try:
            self.requests.send((function, args))
        except OSError as exc:
            raise _WorkerGone("the grader's worker process had ended") from exc
        try:
            ok, value = self.replies.recv()
        except (EOFError, OSError) as exc:
            raise WorkerDied("the grader's worker process ended during the call") from exc
        return bool(ok), value

    def kill(self) -> None:
        """SIGKILL; the thread waiting on its reply sees the pipe close."""
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass  # it has ended already

    def close(self) -> None:
        """Kill it and close the pipes (only by the thread that uses the pipes)."""
        self.kill()
        self.requests.close()
        self.replies.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    except OSError:
        return None


class _Zygote:
    """The one process this process starts for its workers (see
    :mod:`osmo_run.graders.worker_process`): it is warmed once and forks each worker.

    It is started from a thread that lives as long as the process: Linux's parent-death
    signal follows the *thread* that started a child, so a zygote started by a
    short-lived thread would be killed when that thread ends.
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._warmed: set[str] = set()
        self._lock = threading.Lock()
        self._starts: queue.SimpleQueue[concurrent.futures.Future[None]] = queue.SimpleQueue()
        self._starter: threading.Thread | None = None

    def fork_worker(self, warmers: list[tuple[str, Callable[[], object]]]) -> _Worker:
        """A new worker, forked after each of ``warmers`` has run in the zygote (once per
        name). Blocking; ``OSError`` when no worker can start."""
        with self._lock:
            try:
                return self._fork(warmers)
            except (OSError, EOFError):
                self._stop()  # a zygote that died or got stuck: one more try with a new one
            try:
                return self._fork(warmers)
            except (OSError, EOFError) as exc:
                self._stop()
                raise OSError(f"the grader worker processes could not start: {exc}") from exc

    def warm(self, warmers: list[tuple[str, Callable[[], object]]]) -> None:
        """Start the zygote and run ``warmers`` in it, as :meth:`fork_worker` would, so that
        the first row's call does not wait for it. Blocking; never raises."""
        with self._lock:
            try:
                self._warm(self._ensure_started(), warmers)
            except (OSError, EOFError):
                self._stop()  # the first call tries again and reports

    def _warm(
        self, control: socket.socket, warmers: list[tuple[str, Callable[[], object]]]
    ) -> None:
        for name, function in warmers:
            if name not in self._warmed:
                order = pickle.dumps(function)
                control.sendall(b"w" + struct.pack("!I", len(order)) + order)
                if _recv_exactly(control, 1) != b"k":
                    raise EOFError
                self._warmed.add(name)

    def _fork(self, warmers: list[tuple[str, Callable[[], object]]]) -> _Worker:
        control = self._ensure_started()
        self._warm(control, warmers)
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        try:
            socket.send_fds(control, [b"f"], [request_read, reply_write])
            (pid,) = struct.unpack("!i", _recv_exactly(control, 4))
        except BaseException:
            os.close(request_write)
            os.close(reply_read)
            raise
        finally:
            os.close(request_read)
            os.close(reply_write)
        requests = Connection(request_write, readable=False)
        return _Worker(pid, requests, Connection(reply_read), _pidfd(pid))

    def _ensure_started(self) -> socket.socket:
        if self._control is not None and self._process is not None:
            if self._process.poll() is None:
                return self._control
            self._stop()
        if self._starter is None or not self._starter.is_alive():
            self._starter = threading.Thread(
                target=self._start_zygotes, name="grader-zygote-starter", daemon=True
            )
            self._starter.start()
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._starts.put(started)
        started.result()
        assert self._control is not None
        return self._control

    def _start_zygotes(self) -> None:
        while True:
            started = self._starts.get()
            try:
                self._start()
            except BaseException as exc:  # handed to the thread that asked
                started.set_exception(exc)
            else:
                started.set_result(None)

    def _start(self) -> None:
        if not sys.executable:
            raise OSError("no Python interpreter to start grader workers with (sys.executable)")
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _BOOTSTRAP,
                    json.dumps(sys.path),
                    str(os.getpid()),
                    str(theirs.fileno()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # what a grader prints goes nowhere
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.settimeout(_ZYGOTE_REPLY_SEC)
        self._process, self._control, self._warmed = process, ours, set()

    def _stop(self) -> None:
        if self._control is not None:
            self._control.close()
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        self._process = self._control = None

    def kill(self) -> None:
        """Kill the zygote (its workers are killed with it, by their parent-death signal)."""
        if self._process is not None:
            try:
                self._process.kill()
            except OSError:
                pass


def _recv_exactly(control: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = control.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


@dataclass
class _Call:
    """One call: its future, and the worker running it once it has one."""

    function: Callable[..., Any]
    args: tuple[Any, ...]
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    worker: _Worker | None = None
    abandoned: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def abandon(self) -> None:
        """The caller gave up: kill the worker running it, if any."""
        with self.lock:
            self.abandoned = True
            worker = self.worker
        if worker is not None:
            worker.kill()

    def assign(self, worker: _Worker) -> bool:
        """Whether ``worker`` may run the call (its caller has not given up)."""
        with self.lock:
            self.worker = worker
            return not self.abandoned

    def finish(self) -> bool:
        """The worker is done with the call, so giving up kills it no more; whether the
        caller gave up (it may have been killed meanwhile: it is not to be reused)."""
        with self.lock:
            self.worker = None
            return self.abandoned


class GraderWorkers:
    """A pool of at most ``limit`` worker processes; see the module's docstring."""

    def __init__(self, limit: int = WORKER_LIMIT) -> None:
        self._limit = limit
        self._calls: queue.SimpleQueue[tuple[_Call, Callable[[], object] | None]]
        self._calls = queue.SimpleQueue()
        self._pending = 0  # calls queued and not yet taken by a dispatcher
        self._dispatchers = 0  # threads that each run one call at a time, on one worker
        self._free_dispatchers = 0
        self._idle: list[_Worker] = []
        self._alive: set[_Worker] = set()
        self._lock = threading.Lock()
        self._zygote = _Zygote()

    async def run(
        self, function: Callable[..., T], *args: Any, warm: Callable[[], object] | None = None
    ) -> T:
        """``function(*args)`` in a worker process; what it raises is raised here.

        ``function`` and ``args`` must pickle (a module-level function, plain data) and so
        must its result. ``warm`` (a module-level function) is run once where workers are
        forked from, so that what it loads is loaded in every new worker (the libraries
        ``function`` needs). In a process its parent kills at the deadline (``--isolation
        process``, :data:`~osmo_run.sdk.sandbox.SUPERVISED_ENV`) it runs right here.
        Cancelling the caller kills the worker at once (it is replaced on a later call).
        Raises :class:`WorkerDied` when the worker ends during the call, ``OSError`` when
        none can start.
        """
        if os.environ.get(SUPERVISED_ENV):  # this process is killed at the deadline itself
            return function(*args)
        call = _Call(function, args)
        self._submit(call, warm)
        try:
            result: T = await asyncio.wrap_future(call.future)
        except asyncio.CancelledError:
            call.abandon()
            raise
        return result

    def prestart(
        self, function: Callable[..., Any], warm: Callable[[], object] | None = None
    ) -> None:
        """Get ready for calls of ``function`` (with ``warm``, as :meth:`run` takes them) in
        the background: start the process workers are forked from and load what they need,
        so that the first rows' grader deadlines do not pay for it. For a grader's
        ``validate_settings``, which runs before any row. Never raises."""
        if os.environ.get(SUPERVISED_ENV):
            return
        warmers = _warmers(function, warm)
        threading.Thread(
            target=self._zygote.warm, args=(warmers,), name="grader-prestart", daemon=True
        ).start()

    def _submit(self, call: _Call, warm: Callable[[], object] | None) -> None:
        """Queue ``call``, with one more dispatcher when none is free to take it (up to
        ``limit``: one per call running at once, as the run's concurrency has them)."""
        with self._lock:
            self._pending += 1
            start = self._pending > self._free_dispatchers and self._dispatchers < self._limit
            if start:
                self._dispatchers += 1
        self._calls.put((call, warm))
        if start:
            threading.Thread(target=self._dispatch, name="grader-dispatch", daemon=True).start()

    def _dispatch(self) -> None:
        while True:
            with self._lock:
                self._free_dispatchers += 1
            call, warm = self._calls.get()
            with self._lock:
                self._free_dispatchers -= 1
                self._pending -= 1
            if call.future.set_running_or_notify_cancel():  # else its caller gave up
                self._serve(call, warm)

    def _serve(self, call: _Call, warm: Callable[[], object] | None) -> None:
        """Run ``call`` on an idle worker or a new one (blocking)."""
        for attempt in (1, 2):  # an idle worker may have ended since: then a new one
            try:
                worker = self._take(call, warm, fresh=attempt == 2)
            except BaseException as exc:
                _settle(call.future.set_exception, exc)
                return
            if not call.assign(worker):
                self._discard(worker)
                return
            try:
                ok, value = worker.call(call.function, call.args)
            except _WorkerGone:
                call.finish()
                self._discard(worker)
                continue
            except WorkerDied as exc:
                call.finish()
                self._discard(worker)
                _settle(call.future.set_exception, exc)  # nobody waits if it was killed
                return
            except BaseException as exc:  # a request or reply that did not pickle
                ok, value = False, exc
            if call.finish():
                self._discard(worker)
            else:
                self._give_back(worker)
            _settle(call.future.set_result if ok else call.future.set_exception, value)
            return
        _settle(call.future.set_exception, WorkerDied("the grader's worker processes keep ending"))

    def _take(self, call: _Call, warm: Callable[[], object] | None, fresh: bool) -> _Worker:
        if not fresh:
            with self._lock:
                if self._idle:
                    return self._idle.pop()
        worker = self._zygote.fork_worker(_warmers(call.function, warm))
        with self._lock:
            self._alive.add(worker)
        return worker

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._alive.discard(worker)
        worker.close()

    def kill_all(self) -> None:
        """Kill every worker and the zygote (at exit: nothing may outlive the run)."""
        with self._lock:
            workers = list(self._alive)
        for worker in workers:
            worker.kill()
        self._zygote.kill()

    def forget(self) -> None:
        """Drop every worker without touching it: in a forked child, they are the parent's
        (and the dispatcher threads are not there)."""
        self._calls = queue.SimpleQueue()
        self._pending = self._dispatchers = self._free_dispatchers = 0
        self._idle = []
        self._alive = set()
        self._lock = threading.Lock()
        self._zygote = _Zygote()


def _warmers(
    function: Callable[..., Any], warm: Callable[[], object] | None
) -> list[tuple[str, Callable[[], object]]]:
    """What the zygote runs once, by name, before forking a worker for ``function``: the
    import of its module, then ``warm``."""
    module = function.__module__
    warmers: list[tuple[str, Callable[[], object]]] = [
        (module, functools.partial(importlib.import_module, module))
    ]
    if warm is not None:
        warmers.append((f"{warm.__module__}:{warm.__qualname__}", warm))
    return warmers


def _settle(setter: Callable[[Any], None], value: Any) -> None:
    """Hand ``value`` to the waiting caller; one who stopped waiting (cancelled, or its
    event loop closed) is not there to take it."""
    try:
        setter(value)
    except (RuntimeError, concurrent.futures.InvalidStateError):
        pass


GRADER_WORKERS = GraderWorkers()
"""The process's pool, shared by every grader that needs one."""

atexit.register(GRADER_WORKERS.kill_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=GRADER_WORKERS.forget)
