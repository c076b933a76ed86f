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
