"""The grader worker processes' side of :mod:`osmo_run.graders.workers`.

:func:`zygote` is the one process the run starts: it loads what the graders need once
(``warm`` functions the pool sends it) and forks a worker for each one the pool asks for,
handing it the two pipes that came with the order; forking a loaded process is fast, so a
worker killed at a deadline is replaced at little cost. A worker (:func:`serve`) reads a
pickled ``(function, args)``, runs it and writes back ``(True, result)`` or ``(False,
exception)``, until its request pipe closes.

The zygote's orders on its control socket, each answered before the next is read:
``b"w"`` + 4-byte length + a pickled function to run once (answered ``b"k"``), and ``b"f"``
carrying two file descriptors (answered with the new worker's pid, 4 bytes).

Stdlib only.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import struct
import sys
from multiprocessing.connection import Connection
from typing import Any

_PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal the kernel sends this process when its parent ends."""


def _die_with_parent(parent_pid: int) -> None:
    """Be SIGKILLed by the kernel when the parent ends, even in the middle of a computation
    that holds the GIL (Linux; elsewhere a closed pipe ends an idle process)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # it ended before the signal was asked for
        os._exit(0)


def _recv_exactly(control: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = control.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def zygote(parent_pid: int, control_fd: int) -> None:
    """Serve the pool's orders on ``control_fd`` until the parent closes it (or ends).

    Ctrl-C at a terminal reaches the whole process group: the zygote and its workers ignore
    it and leave their lives to the parent, which kills a worker whose call it gave up.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the workers
    _die_with_parent(parent_pid)
    control = socket.socket(fileno=control_fd)
    while True:
        try:
            kind, fds, _, _ = socket.recv_fds(control, 1, 2)
            if not kind:
                return
            if kind == b"w":
                (size,) = struct.unpack("!I", _recv_exactly(control, 4))
                warm = _recv_exactly(control, size)
                try:
                    pickle.loads(warm)()
                except BaseException:
                    pass  # the call that needs it reports the problem
                control.sendall(b"k")
            elif kind == b"f":
                zygote_pid = os.getpid()
                pid = os.fork()
                if pid == 0:
                    control.close()
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    _die_with_parent(zygote_pid)
                    serve(fds[0], fds[1])
                    os._exit(0)
                for fd in fds:
                    os.close(fd)
                control.sendall(struct.pack("!i", pid))
        except (EOFError, OSError):
            return


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a ``RuntimeError`` with its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def serve(request_fd: int, reply_fd: int) -> None:
    """Answer requests from ``request_fd`` on ``reply_fd`` until the parent closes it."""
    requests = Connection(request_fd, writable=False)
    replies = Connection(reply_fd, readable=False)
    while True:
        outcome: tuple[bool, Any]
        try:
            function, args = requests.recv()
        except EOFError:
            return
        except Exception as exc:  # a request this process cannot unpickle (import error)
            outcome = (False, _portable(exc))
        else:
            try:
                outcome = (True, function(*args))
            except BaseException as exc:  # the caller's to re-raise
                outcome = (False, _portable(exc))
        try:
            replies.send(outcome)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            replies.send((False, RuntimeError(f"the grader's result did not pickle: {exc}")))
