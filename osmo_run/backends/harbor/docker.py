"""Docker commands the Harbor backend runs itself: the prebuilt image and leftover sweeps.

Harbor drives containers during trials; these helpers cover what happens around them.
Every command runs as an asyncio subprocess so the event loop keeps serving trials.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from osmo_run.backends.harbor.cache import note_image_used
from osmo_run.backends.harbor.runtime import (
    CONTAINER_CODE_DIR,
    CONTAINER_DEPS_DIR,
    CONTAINER_RUNTIME_DIR,
    tree_digest,
)
from osmo_run.errors import DockerCommandError, EnvironmentNotReady, TaskDirError
from osmo_run.run.controls.interrupts import child_group

RUN_LABEL = "osmo-run.run-id"
"""Docker label on every container and network of a run (its manifest's run id), so
``osmo-run cleanup`` finds what a killed run left."""
INVOCATION_LABEL = "osmo-run.invocation"
"""Docker label naming one ``osmo-run`` process's trials, swept when that process ends."""


LOCK_LABEL = "osmo-run.lock"
"""Docker label naming the run lock file (:mod:`osmo_run.run.writing.runlock`) of the invocation
that started a container: while that file is locked, the container belongs to a live run
and no sweep removes it."""


def labels_overlay(run_id: str, invocation: str, lock_file: Path | None = None) -> str:
    """A compose file adding the run, invocation and (given ``lock_file``) lock labels to
    the trial's main service and its network."""
    values = {RUN_LABEL: run_id, INVOCATION_LABEL: invocation}
    if lock_file is not None:
        values[LOCK_LABEL] = str(lock_file)
    # JSON strings are YAML double-quoted scalars: any path stays one value
    labels = "".join(f"      {key}: {json.dumps(value)}\n" for key, value in values.items())
    return f"services:\n  main:\n    labels:\n{labels}networks:\n  default:\n    labels:\n{labels}"


async def docker(
    *args: str, check: bool = True, timeout_sec: float = 900.0, timeout_note: str = ""
) -> str:
    """Run ``docker ARGS``; return stdout (stderr merged).

    The command runs in a process group of its own, ended (SIGKILL to the group) when it
    outlives ``timeout_sec`` or the awaiting task is cancelled (Ctrl-C, SIGTERM), so no
    ``docker build`` survives osmo-run; a Ctrl-C at a terminal reaches osmo-run alone,
    which ends the group itself. Raises :class:`DockerCommandError` on failure or timeout
    (its message ends with ``timeout_note``, saying where the limit comes from).
    """
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # no buildx here; the classic builder works
    try:
        process = await asyncio.create_subprocess_exec(
            "docker",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise EnvironmentNotReady(
            "the docker command is not installed; run `sudo scripts/provision-docker.sh`"
        ) from None
    with child_group(process.pid):
        try:
            output, _ = await asyncio.wait_for(process.communicate(), timeout_sec)
        except TimeoutError:
            await _end(process)
            raise DockerCommandError(
                f"docker {args[0]} took longer than {timeout_sec:g}s{timeout_note}"
            ) from None
        except BaseException:  # cancelled: the run was interrupted
            await asyncio.shield(_end(process))
            raise
    text = output.decode("utf-8", "replace")
    if check and process.returncode != 0:
        raise DockerCommandError(f"docker {' '.join(args[:3])} failed: {text.strip()[-800:]}")
    return text


async def _end(process: asyncio.subprocess.Process) -> None:
    """Kill ``process``'s group and reap it (no zombie, no transport closed late)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


def _detail(exc: DockerCommandError) -> str:
    """The docker output of a failed command, on one line."""
    text = str(exc).partition(" failed: ")[2] or str(exc)
    return " ".join(text.split())


async def engine_ready() -> None:
    """Raise :class:`EnvironmentNotReady` unless a Docker engine and compose v2 answer."""
    try:
        await docker("info", "--format", "{{.ServerVersion}}", timeout_sec=20)
    except DockerCommandError:
        raise EnvironmentNotReady(
            "no Docker engine answers (`docker info` failed); start one with "
            "`sudo scripts/provision-docker.sh`"
        ) from None
    try:
        await docker("compose", "version", timeout_sec=20)
    except DockerCommandError:
        raise EnvironmentNotReady(
            "`docker compose` (v2) is missing, and Harbor needs it; "
            "`sudo scripts/provision-docker.sh` installs it"
        ) from None


async def bridge_gateway() -> str:
    """The host's IPv4 address on Docker's default bridge, which every container can reach.

    Raises :class:`EnvironmentNotReady` when the engine does not say, or says nothing
    usable (see :func:`gateway_of_bridge`).
    """
    try:
        text = await docker("network", "inspect", "bridge")
        (network,) = json.loads(text)
    except (DockerCommandError, ValueError, TypeError) as exc:
        raise EnvironmentNotReady(f"cannot find Docker's bridge network: {exc}") from None
    return gateway_of_bridge(network, _interface_ipv4)


def gateway_of_bridge(network: dict[str, Any], interface_ipv4: Callable[[str], str | None]) -> str:
    """The host's address on the bridge network ``network`` (one object of ``docker network
    inspect``): its IPAM gateway; else the IPv4 address of its bridge interface (looked up
    with ``interface_ipv4``); else the first address of its subnet, which Docker gives the
    bridge by default.

    A freshly created engine records the default bridge as ``[{"Subnet": "172.17.0.0/16"}]``,
    without a gateway, until it restarts: the gateway field alone was empty there, and the
    relay listened on every interface while trials were sent to ``http://:PORT``. Raises
    :class:`EnvironmentNotReady` when no IPv4 address can be found.
    """
    configs = (network.get("IPAM") or {}).get("Config") or []
    for config in configs:
        gateway = str(config.get("Gateway") or "")
        if gateway and ipaddress.ip_address(gateway.split("/")[0]).version == 4:
            return gateway.split("/")[0]
    name = (network.get("Options") or {}).get("com.docker.network.bridge.name")
    address = interface_ipv4(str(name)) if name else None
    if address:
        return address
    for config in configs:
        subnet = ipaddress.ip_network(str(config.get("Subnet") or "::/128"), strict=False)
        if subnet.version == 4 and subnet.num_addresses > 2:
            return str(subnet[1])
    raise EnvironmentNotReady(
        f"Docker's bridge network records no IPv4 gateway or subnet ({json.dumps(configs)}); "
        "restart the engine, or serve the model on an address containers reach"
    )


def _interface_ipv4(name: str) -> str | None:
    """The IPv4 address of network interface ``name`` (Linux), ``None`` if unknown."""
    try:
        import fcntl
        import socket
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            request = struct.pack("256s", name.encode()[:15])
            answer = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
        return socket.inet_ntoa(answer[20:24])
    except (ImportError, OSError):
        return None


_SIOCGIFADDR = 0x8915
"""Linux ioctl: an interface's IPv4 address (``ip -4 addr show NAME`` without iproute2)."""


async def image_exists(tag: str) -> bool:
    return not (await docker("image", "inspect", tag, check=False)).startswith("[]")


def task_base_image(task_dir: Path) -> str | None:
    """``[environment].docker_image`` of a task, or ``None`` when it builds a Dockerfile."""
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # TOMLDecodeError, or not UTF-8
        raise TaskDirError(f"{task_dir / 'task.toml'}: cannot read it: {exc}") from None
    except RecursionError:
        raise TaskDirError(
            f"{task_dir / 'task.toml'}: nested too deeply to read; a task.toml is a few "
            "flat sections"
        ) from None
    image = (config.get("environment") or {}).get("docker_image")
    return str(image) if image else None


DEFAULT_BUILD_TIMEOUT_SEC = 600.0
"""Harbor's default ``[environment].build_timeout_sec``."""


def task_build_timeout(task_dir: Path) -> float:
    """``[environment].build_timeout_sec`` of a task (Harbor's default when unset or not
    a positive number; a task Harbor rejects is refused before, see :mod:`.preflight`)."""
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return DEFAULT_BUILD_TIMEOUT_SEC
    value = (config.get("environment") or {}).get("build_timeout_sec")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DEFAULT_BUILD_TIMEOUT_SEC
    return float(value) if 0 < value < float("inf") else DEFAULT_BUILD_TIMEOUT_SEC


BUILT_LABEL = "osmo-run.built"
"""Label on every image osmo-run builds (task, dependency and prebuilt images), which
``osmo-run cleanup --images`` prunes; ``osmo-run.prebuilt`` marks the older ones."""


async def _build(tag: str, context: Path, timeout_sec: float = 900.0, note: str = "") -> None:
    """``docker build`` the ``context`` into ``tag``, its intermediate containers removed
    even when a step fails (``--force-rm``: the classic builder keeps them otherwise, and
    they carry no label a cleanup could find). Raises :class:`DockerCommandError` naming
    the failing step."""
    try:
        await docker(
            "build", "-q", "--force-rm", "--label", f"{BUILT_LABEL}=1", "-t", tag, str(context),
            timeout_sec=timeout_sec, timeout_note=note,
        )  # fmt: skip
    except DockerCommandError as exc:
        raise DockerCommandError(build_failure(str(exc))) from None


_BANNER_START = "DEPRECATED: The legacy builder"


def build_failure(message: str) -> str:
    """The message of a failed ``docker build`` on one line, led by the step that failed
    and its error, without the classic builder's deprecation banner."""
    _, sep, output = message.partition(" failed: ")
    if not sep:
        return message
    lines = output.splitlines()
    if lines and lines[0].startswith(_BANNER_START):
        ends = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
        lines = lines[ends:]
    lines = [line.strip() for line in lines if line.strip()]
    steps = [line for line in lines if line.startswith("Step ")]
    error = lines[-1] if lines else "no output"
    noise = ("Sending build context", "Step ", "--->", "Removing intermediate")
    shown = [line for line in lines[:-1] if not line.startswith(noise)][-3:]
    where = f" at {steps[-1]}" if steps else ""
    last = f" (last output: {' | '.join(shown)})" if shown else ""
    text = f"docker build failed{where}: {error}{last}"
    # the Dockerfile's own output: no escape sequence or bidi control reaches a terminal
    return "".join(char if char.isprintable() else " " for char in text)[:1000]


async def task_image(task_dir: Path) -> str:
    """The task's own image: ``[environment].docker_image`` (pulled when missing), or its
    ``environment/Dockerfile`` built once (content-addressed); return its tag.

    Raises :class:`TaskDirError` for a task with neither, and :class:`DockerCommandError`
    when the build or the pull fails.
    """
    base = task_base_image(task_dir)
    if base is None:
        environment_dir = task_dir / "environment"
        if not (environment_dir / "Dockerfile").is_file():
            raise TaskDirError(
                f"{task_dir}: task.toml names no [environment].docker_image and "
                "environment/Dockerfile is missing; give the task an image"
            )
        base = f"osmo-run/task:{tree_digest(environment_dir)[:16]}"
        if not await image_exists(base):
            limit = task_build_timeout(task_dir)
            note = f" (the task's [environment].build_timeout_sec in {task_dir / 'task.toml'})"
            await _build(base, environment_dir, limit, note)
    elif not await image_exists(base):
        try:  # a registry image, as Harbor would pull it
            await docker("pull", "-q", base)
        except DockerCommandError as exc:
            raise DockerCommandError(
                f"the task image {base} ([environment].docker_image of {task_dir}) is not on "
                f"this machine and could not be pulled: {_detail(exc)}"
            ) from None
    return base


async def image_id(tag: str) -> str:
    return (await docker("image", "inspect", "--format", "{{.Id}}", tag)).strip()


async def dependencies_image(base: str, site_archive: Path) -> str:
    """``base`` with the workflow's installed requirements (``site_archive``, a tar of one
    site-packages directory) under :data:`CONTAINER_DEPS_DIR`, byte-compiled by the image's
    own Python; content-addressed, so a second run with the same requirements reuses it."""
    digest = hashlib.sha256(f"{await image_id(base)}|{site_archive.name}".encode()).hexdigest()
    tag = f"osmo-run/deps:{digest[:16]}"
    if await image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="osmo-run-deps-") as context:
        root = Path(context)
        try:  # a hard link spares copying hundreds of MB into the build context
            os.link(site_archive, root / "site.tar")
        except OSError:
            shutil.copy2(site_archive, root / "site.tar")
        (root / "Dockerfile").write_text(
            f"FROM {base}\n"
            f"ADD site.tar {CONTAINER_DEPS_DIR}/\n"
            # .pyc files for the image's Python (the runner writes none per trial), unless
            # the host had that Python and compiled them already
            f"RUN [ -n \"$(find {CONTAINER_DEPS_DIR} -name '*.pyc' -print -quit)\" ] || "
            f"python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash "
            f"{CONTAINER_DEPS_DIR} >/dev/null 2>&1 || true\n",
            encoding="utf-8",
        )
        await _build(tag, root)
    return tag


async def prebuild_image(
    task_dir: Path, runtime_dir: Path, code_dir: Path, site_archive: Path | None = None
) -> str:
    """Build once, or reuse, an image holding the task's environment, the workflow's
    installed requirements (``site_archive``, see :func:`dependencies_image`), the osmo-run
    SDK and the user's code; return its tag (content-addressed, so unchanged inputs reuse
    it; the requirements are a layer of their own, so a code change keeps them).

    Raises :class:`TaskDirError` for a task with neither ``docker_image`` nor a Dockerfile,
    and :class:`DockerCommandError` when a build or the pull of a missing image fails.
    """
    base = await task_image(task_dir)
    note_image_used(base)
    if site_archive is not None:
        base = await dependencies_image(base, site_archive)
        note_image_used(base)
    digest = hashlib.sha256(
        (await image_id(base) + tree_digest(runtime_dir) + tree_digest(code_dir)).encode()
    ).hexdigest()
    tag = f"osmo-run/prebuilt:{digest[:16]}"
    note_image_used(tag)  # for `osmo-run cleanup --images`, which keeps recently used ones
    if await image_exists(tag):
        return tag
    # inside the run's staging directory, which a later run removes if this one is killed
    with tempfile.TemporaryDirectory(prefix="image-", dir=runtime_dir.parent) as context:
        root = Path(context)
        shutil.copytree(runtime_dir, root / "runtime")
        shutil.copytree(code_dir, root / "code")
        (root / "Dockerfile").write_text(
            f"FROM {base}\n"
            f"COPY runtime {CONTAINER_RUNTIME_DIR}\n"
            f"COPY code {CONTAINER_CODE_DIR}\n"
            f'LABEL osmo-run.prebuilt="1"\n',
            encoding="utf-8",
        )
        await _build(tag, root)
    return tag


async def remove_labelled(label: str, keep: Callable[[str], bool] | None = None) -> tuple[int, int]:
    """Remove every container, then every network, carrying ``label`` (``key`` or
    ``key=value``), except those whose :data:`LOCK_LABEL` value ``keep`` says to keep (a
    live run's); return how many of each were removed. Never raises."""
    try:
        ids = await _labelled("ps", "-a", label=label, keep=keep)
        if ids:
            await docker("rm", "-f", *ids, check=False)
        networks = await _labelled("network", "ls", label=label, keep=keep)
        if networks:
            await docker("network", "rm", *networks, check=False)
        return len(ids), len(networks)
    except Exception:
        return 0, 0


async def _labelled(*listing: str, label: str, keep: Callable[[str], bool] | None) -> list[str]:
    """The ids ``docker LISTING`` gives for ``label``, less those ``keep`` keeps."""
    # the label as JSON: a run directory's path may hold a newline or a space
    form = "{{.ID}} {{json (.Label " + json.dumps(LOCK_LABEL) + ")}}"
    text = await docker(*listing, "--filter", f"label={label}", "--format", form)
    ids = []
    for line in text.splitlines():
        found, _, quoted = line.strip().partition(" ")
        try:
            lock_file = json.loads(quoted) if quoted else ""
        except ValueError:
            lock_file = ""
        if found and not (keep is not None and lock_file and keep(str(lock_file))):
            ids.append(found)
    return ids
