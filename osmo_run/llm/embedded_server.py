"""The embedded model server's own process: llama.cpp's server (the ``xllamacpp`` wheel)
serving one GGUF model on 127.0.0.1 with an OpenAI-compatible ``/v1/chat/completions``.

    python -m osmo_run.llm.embedded_server --model FILE.gguf --alias NAME [--parallel N]

It listens on a free port, and once it answers ``/health`` prints one JSON line to stdout,
``{"base_url": "http://127.0.0.1:PORT/v1", "model": NAME, "pid": PID}``, then serves until
SIGTERM. It never outlives its parent: it exits when its stdin reaches end of file (the
parent keeps the pipe's other end and the kernel closes it however the parent ends, even
``kill -9``) and, with ``--die-with-parent`` on Linux, the kernel kills it with the parent
(``PR_SET_PDEATHSIG``). Ctrl-C in a terminal does not reach it (the parent starts it in a
session of its own); the parent stops it when the run ends. Started by
:class:`osmo_run.llm.embedded.EmbeddedLLMServer`.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from typing import Any

_PR_SET_PDEATHSIG = 1
EXIT_STARTUP_FAILED = 3


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent ends; no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent ended before the request took effect
        os._exit(0)


def _exit_on_stdin_eof() -> None:
    """Exit at once when stdin ends: the parent closed it, or the parent is gone."""

    def watch() -> None:
        try:
            while sys.stdin.buffer.read(1024):
                pass
        except (OSError, ValueError):
            pass
        os._exit(0)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _wait_healthy(base: str, timeout_sec: float) -> None:
    deadline = time.monotonic() + timeout_sec
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{base}/health did not answer 200 within {timeout_sec:g}s")
        time.sleep(0.05)


def _params(xlc: Any, args: argparse.Namespace) -> Any:
    params = xlc.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}  # a set: a plain string becomes one alias per character
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # a free port; read back from listening_address
    params.n_parallel = args.parallel
    params.n_ctx = args.ctx
    params.kv_unified = True  # slots share the context: any one request may use all of it
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cache_ram_mib = 256
    params.warmup = False  # startup in well under a second; the first answer pays instead
    params.verbosity = args.verbosity
    return params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m osmo_run.llm.embedded_server")
    parser.add_argument("--model", required=True, help="GGUF model file")
    parser.add_argument("--alias", required=True, help="model name clients send")
    parser.add_argument("--parallel", type=int, default=4, help="requests decoded at once")
    parser.add_argument("--ctx", type=int, default=8192, help="context tokens, shared by slots")
    # One thread: a 135M model decodes ~100 tokens/s on it, and with two, llama.cpp's
    # threads wait on each other whenever another process takes a core (20x slower here).
    parser.add_argument("--threads", type=int, default=1, help="decoding threads")
    parser.add_argument("--verbosity", type=int, default=1)
    parser.add_argument("--health-timeout", type=float, default=30.0)
    parser.add_argument("--parent", type=int, default=None, help="parent pid to die with")
    parser.add_argument("--die-with-parent", action="store_true")
    args = parser.parse_args(argv)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the run ends
    signal.signal(signal.SIGTERM, lambda _sig, _frame: os._exit(0))
    if args.die_with_parent and args.parent is not None:
        _die_with_parent(args.parent)
    _exit_on_stdin_eof()

    try:
        import xllamacpp as xlc
    except ImportError as exc:
        print(f"cannot import xllamacpp: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILED
    try:
        server = xlc.Server(_params(xlc, args))
        base = str(server.listening_address).rstrip("/")
        _wait_healthy(base, args.health_timeout)
    except Exception as exc:
        print(f"the model server did not start: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILED
    ready = {"base_url": base + "/v1", "model": args.alias, "pid": os.getpid()}
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()
    while True:  # the server runs in its own threads; this one only waits for the end
        signal.pause()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never wait for the server's threads
