"""One rule for a workflow or grader that ends the process instead of returning.

``sys.exit`` (``SystemExit``) in a workflow or grader fails that rollout's phase with
``agent_error`` and the run goes on, on every backend: in-process rows catch it here
(:func:`exits_as_errors`); a process that ends some other way (``os._exit``, a signal) is
reported by whoever ran it, with the same words (:func:`exited_message`).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class ExitedWithoutReturning(Exception):
    """A workflow or grader called ``sys.exit``; its message is :func:`exited_message`'s."""


def exited_message(what: str, code: int) -> str:
    """How a ``what`` (``workflow`` or ``grader``) that exited with ``code`` is reported."""
    return (
        f"the {what} exited with code {code} without returning (sys.exit or os._exit in its code?)"
    )


def exit_code(exc: SystemExit) -> int:
    """The exit status a process ending with ``exc`` reports: ``None`` → 0, an integer
    modulo 256 (``True`` → 1, ``-1`` → 255, ``256`` → 0), anything else (a message) → 1."""
    if exc.code is None:
        return 0
    return int(exc.code) & 0xFF if isinstance(exc.code, int) else 1


async def exits_as_errors(coro: Coroutine[Any, Any, T], what: str) -> T:
    """Await ``coro``; a ``SystemExit`` it raises becomes :class:`ExitedWithoutReturning`
    (with the same traceback, so the error names the line that exited).

    The wrapper must run inside the task that runs ``coro``: asyncio lets a
    ``SystemExit`` out of a task through the event loop, ending the whole process."""
    try:
        return await coro
    except SystemExit as exc:
        raise exited_error(exc, what) from None


def exited_error(exc: SystemExit, what: str) -> ExitedWithoutReturning:
    """The error a ``what`` that raised ``exc`` fails with: its traceback is ``exc``'s, so
    the error names the line that exited (raise it ``from None``)."""
    error = ExitedWithoutReturning(exited_message(what, exit_code(exc)))
    return error.with_traceback(exc.__traceback__)
