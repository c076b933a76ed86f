"""Fixtures for the harbor backend's tests: the Docker gate, the real ``osmo-run harbor``
command, and a fake model server on the host's loopback.

Docker tests carry ``@pytest.mark.docker``. Without an engine (or without the base image
``osmo-run/bookworm:latest``) they are skipped, unless ``OSMO_RUN_REQUIRE_DOCKER=1`` (CI),
where they fail instead.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
"""tests/harbor: the code dir trials import ``harbor_workflows`` from."""
REPO = HERE.parents[1]
CALCULATOR_TASK = REPO / "tasks" / "calculator"
TASKS_ROOT = HERE / "tasks"
"""Extra tasks rows select with ``metadata.harbor_task``: second, no-reward, bad-image,
no-start."""
OSMO_RUN = Path(sys.executable).parent / "osmo-run"
BASE_IMAGE = "osmo-run/bookworm:latest"
RUN_LABEL = "osmo-run.invocation"  # one osmo-run process's trials (their names carry it)
WORKFLOW = "harbor_workflows:ScriptedWorkflow"
GRADER = "harbor_workflows:ScriptedGrader"
NO_DOCKER = "no Docker engine: run sudo scripts/provision-docker.sh"


def _docker(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _docker_problem() -> str | None:
    """Why Docker tests cannot run here, or ``None`` when they can."""
    try:
        info = _docker("info", "--format", "{{.ServerVersion}}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{NO_DOCKER} (`docker info`: {exc})"
    if info.returncode != 0:
        return f"{NO_DOCKER} (`docker info` failed: {info.stderr.strip()[:200]})"
    if _docker("image", "inspect", BASE_IMAGE).returncode != 0:
        return f"{NO_DOCKER} (image {BASE_IMAGE} is missing)"
    return None


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Skip (or, with ``OSMO_RUN_REQUIRE_DOCKER=1``, fail) unless Docker tests can run."""
    problem = _docker_problem()
    if problem is None:
        return
    if os.environ.get("OSMO_RUN_REQUIRE_DOCKER") == "1":
        pytest.fail(f"OSMO_RUN_REQUIRE_DOCKER=1 but {problem}", pytrace=False)
    pytest.skip(problem)


@pytest.fixture(autouse=True)
def _docker_gate(request: pytest.FixtureRequest) -> None:
    """Every test marked ``docker`` goes through :func:`docker_engine`."""
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("docker_engine")


def labelled_containers(run_id: str | None = None) -> list[str]:
    """Names of the containers (running or not) carrying osmo-run's run label: of the run
    ``run_id`` only when given (other runs may share the engine), else of every run."""
    label = RUN_LABEL if run_id is None else f"{RUN_LABEL}={run_id}"
    try:
        listing = _docker("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}")
    except OSError:  # no docker command: no containers
        return []
    return listing.stdout.split()


def run_id_of_containers(trial_fragment: str) -> str | None:
    """The run id labelling the containers whose trial name contains ``trial_fragment``."""
    listing = _docker(
        "ps",
        "-a",
        "--filter",
        f"label={RUN_LABEL}",
        "--format",
        '{{.Names}} {{.Label "' + RUN_LABEL + '"}}',
    )
    for line in listing.stdout.splitlines():
        name, _, run_id = line.partition(" ")
        if trial_fragment in name:
            return run_id
    return None


def wait_for_no_labelled_containers(run_id: str, timeout_sec: float = 10.0) -> list[str]:
    """Poll until no container of ``run_id`` remains; return what is left at the timeout."""
    deadline = time.monotonic() + timeout_sec
    while (left := labelled_containers(run_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def run_id_of_rows(rows: dict[str, dict[str, Any]]) -> str | None:
    """The run id in the trial names the rows record (``osmo-<run id>-<n>-<row>``)."""
    for row in rows.values():
        trial_name = row.get("backend", {}).get("trial_name")
        if trial_name:
            return str(trial_name).split("-")[1]
    return None


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of an ``osmo-run`` subprocess: no forced colours, fixed width."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"FORCE_COLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "OSMO_RUN_DEBUG"}
        and not k.startswith("DAYTONA_")
    }
    env["COLUMNS"] = "120"
    env.update(extra)
    return env


def logging_docker(directory: Path) -> tuple[dict[str, str], Path]:
    """An environment whose ``docker`` (a wrapper first on ``PATH``) appends its arguments
    to the returned log file, one command a line, then runs the real ``docker``: a test
    counts the pulls and builds osmo-run asks for without faking the engine."""
    real = shutil.which("docker")
    assert real is not None, "docker is not installed (scripts/provision-docker.sh)"
    bin_dir, log = directory / "docker-bin", directory / "docker.log"
    bin_dir.mkdir()
    log.touch()
    wrapper = bin_dir / "docker"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}, log


@dataclass
class HarborRun:
    """What a user sees after one ``osmo-run harbor`` command."""

    returncode: int
    stdout: str
    stderr: str
    wall_sec: float
    output: Path
    rows: dict[str, dict[str, Any]]
    """Output lines by row id (empty when nothing was written)."""
    run_id: str | None
    """The run's id, read from its rows' trial names (``None`` if no trial ran)."""
    leftovers: list[str]
    """Containers labelled with the run's id (every labelled one if no trial ran), listed
    right after the command exited."""

    @property
    def out_dir(self) -> Path:
        return self.output.parent

    @property
    def summary(self) -> dict[str, Any]:
        path = self.output.with_name(self.output.stem + ".summary.json")
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def read_rows(output: Path) -> dict[str, dict[str, Any]]:
    if not output.is_file():
        return {}
    rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    return {row["row_id"]: row for row in rows}


def write_inputs(
    directory: Path, rows: list[dict[str, Any]] | None, spec: dict[str, Any] | None
) -> list[str]:
    """Write ``data.jsonl`` and ``spec.yaml`` (JSON is YAML) into ``directory``; return the
    command-line arguments naming them."""
    directory.mkdir(parents=True, exist_ok=True)
    args: list[str] = []
    if rows is not None:
        dataset = directory / "data.jsonl"
        dataset.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        args.append(str(dataset))
    if spec is not None:
        spec_file = directory / "spec.yaml"
        spec_file.write_text(json.dumps(spec, indent=2), encoding="utf-8")
        args += ["--spec", str(spec_file)]
    return args


def harbor_spec(**overrides: Any) -> dict[str, Any]:
    """A run spec for the scripted workflow and grader in the calculator task, short
    deadlines, concurrency 3, and extra tasks under :data:`TASKS_ROOT`."""
    spec: dict[str, Any] = {
        "workflow": WORKFLOW,
        "grader": GRADER,
        "code_dir": str(HERE),
        "concurrency": 3,
        "timeouts": {"agent_sec": 3, "grader_sec": 3},
        "harbor": {"task_dir": str(CALCULATOR_TASK), "tasks_root": str(TASKS_ROOT)},
    }
    spec.update(overrides)
    return spec


def run_harbor(
    directory: Path,
    rows: list[dict[str, Any]] | None,
    spec: dict[str, Any] | None,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> HarborRun:
    """Run ``osmo-run harbor [data.jsonl] [--spec spec.yaml] ARGS -o DIR/out/results.jsonl
    --display plain`` from ``directory`` and collect what it left."""
    output = directory / "out" / "results.jsonl"
    command = [
        str(OSMO_RUN),
        "harbor",
        *write_inputs(directory, rows, spec),
        *args,
        "-o",
        str(output),
        "--display",
        "plain",
    ]
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=directory,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.monotonic() - started
    recorded = read_rows(output)
    run_id = run_id_of_rows(recorded)
    return HarborRun(
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        wall_sec=wall,
        output=output,
        rows=recorded,
        run_id=run_id,
        leftovers=labelled_containers(run_id),
    )


def start_harbor(
    directory: Path, rows: list[dict[str, Any]], spec: dict[str, Any]
) -> tuple[subprocess.Popen[str], Path]:
    """Start ``osmo-run harbor`` in the background; return the process and its output path."""
    output = directory / "out" / "results.jsonl"
    command = [str(OSMO_RUN), "harbor", *write_inputs(directory, rows, spec)]
    command += ["-o", str(output), "--display", "plain"]
    process = subprocess.Popen(
        command,
        cwd=directory,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a SIGINT for the test runner must not reach it
    )
    return process, output


def stop_process(process: subprocess.Popen[str]) -> None:
    """Kill a still-running ``osmo-run`` started by a test (its own process group)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@dataclass
class FakeModel:
    """An OpenAI-compatible endpoint on 127.0.0.1 (once :func:`serving`) that always
    answers ``reply``; ``requests`` logs each call's path, model, Authorization header and
    prompt (its last message's content)."""

    base_url: str = ""
    reply: str = "42"
    requests: list[dict[str, Any]] = field(default_factory=list)


@contextlib.contextmanager
def serving(model: FakeModel) -> Iterator[FakeModel]:
    """Serve ``model`` on the host's loopback (its ``base_url`` set) until the block ends."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            messages = body.get("messages") or [{}]
            model.requests.append(
                {
                    "path": self.path,
                    "model": body.get("model"),
                    "authorization": self.headers.get("Authorization"),
                    "prompt": str(messages[-1].get("content")),
                }
            )
            payload = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": model.reply}}]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    model.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield model
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def fake_model() -> Iterator[FakeModel]:
    """A chat-completions server on the host's loopback answering ``42``."""
    with serving(FakeModel()) as model:
        yield model
