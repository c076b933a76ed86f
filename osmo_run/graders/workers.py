"""A few daemon threads for blocking, CPU-bound grading work (symbolic math).

Unlike ``asyncio.to_thread`` this does not share the default pool that model calls use,
and unlike a ``ThreadPoolExecutor`` its threads are daemons: a computation that never
ends holds one worker, never the process's exit. Stdlib only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]


class DaemonWorkers:
    """``count`` daemon threads, started on first use, that run jobs in order."""

    def __init__(self, count: int, name: str) -> None:
        self._count = count
        self._name = name
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._started = False
        self._lock = threading.Lock()

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on a worker; its exception is raised here. Cancelling the
        caller drops a job that has not started (one that has runs to its end)."""
        self._start()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((future, function, args))
        return await asyncio.wrap_future(future)

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            for i in range(self._count):
                threading.Thread(target=self._work, name=f"{self._name}-{i}", daemon=True).start()
            self._started = True

    def _work(self) -> None:
        while True:
            future, function, args = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue  # its caller gave up before it started
            try:
                outcome = function(*args)
            except BaseException as exc:  # handed to the caller, who re-raises it
                _settle(future.set_exception, exc)
            else:
                _settle(future.set_result, outcome)


def _settle(setter: Callable[[Any], None], value: Any) -> None:
    """Hand ``value`` to the waiting caller; a caller whose event loop has closed since
    (a run that ended) waits no more, and the worker goes on to the next job."""
    try:
        setter(value)
    except RuntimeError:
        pass
