"""Ctrl-C and SIGTERM during a run: the first stops the run gently, the second at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from types import FrameType

from osmo_run.errors import ExitCode

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_CHILD_GROUPS: set[int] = set()
"""Process groups of the commands osmo-run runs now (``docker build``, say), each led by
its command; a second Ctrl-C kills them before leaving, so none is orphaned."""


@contextlib.contextmanager
def child_group(pid: int) -> Iterator[None]:
    """While inside, the process group led by ``pid`` (a child started with
    ``start_new_session=True``, which a terminal's Ctrl-C no longer reaches) is killed
    if osmo-run leaves at once on a second Ctrl-C or SIGTERM."""
    _CHILD_GROUPS.add(pid)
    try:
        yield
    finally:
        _CHILD_GROUPS.discard(pid)


def kill_child_groups() -> None:
    """SIGKILL every group :func:`child_group` holds; safe in a signal handler."""
    for group in list(_CHILD_GROUPS):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


@contextlib.contextmanager
def interrupts_handled(
    loop: asyncio.AbstractEventLoop, on_interrupt: Callable[[], None], on_exit: Callable[[], None]
) -> Iterator[None]:
    """While inside, the first SIGINT/SIGTERM schedules ``on_interrupt`` on ``loop``; a
    second one calls ``on_exit`` and leaves the process at once with exit code 130 (every
    finished row is on disk already). The previous handlers come back on leaving.

    Python-level handlers, not ``loop.add_signal_handler``: they run even while a workflow
    blocks the event loop, so a second Ctrl-C always quits. Call from the main thread.
    """
    interrupted = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupted
        if interrupted:
            kill_child_groups()
            on_exit()
            os._exit(ExitCode.INTERRUPTED)
        interrupted = True
        with contextlib.suppress(RuntimeError):  # the loop has closed: the run is over
            loop.call_soon_threadsafe(on_interrupt)

    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    for sig in _SIGNALS:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
