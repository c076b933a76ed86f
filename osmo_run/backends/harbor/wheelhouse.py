"""The workflow's requirements, resolved and installed on the host for the trial's image.

The trial's image has Python >= 3.11 but maybe no pip and no network, so nothing is
installed inside it. Instead, on the host:

1. the image is asked its Python version, machine and C library once
   (:func:`image_python`, cached by image id);
2. ``pip download --only-binary=:all: --platform ... --python-version ...`` fetches
   wheels for that interpreter into a wheelhouse cached by the requirement set and target
   (a requirement with no such wheel is one :class:`RequirementsError`, before any trial);
3. ``pip install --target --no-index`` from the wheelhouse lays them out as one
   ``site-packages`` directory, archived (:func:`installed_site`, cached the same way):
   the prebuilt image adds it, or each trial gets it uploaded and extracted at setup, and
   it is on the runner's ``PYTHONPATH`` either way.

pip rather than uv: uv is not on this machine's index mirror by default, and pip's
``--platform`` resolution is the documented cross-target path; bench/ measures both steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from osmo_run.backends.harbor import docker as docker_ops
from osmo_run.backends.harbor.cache import cache_dir, writable_cache_dir
from osmo_run.backends.harbor.requirements import RequirementOptions, RequirementSet
from osmo_run.errors import DockerCommandError, RequirementsError

SITE_ARCHIVE = "site.tar"
PROBE_LABEL = "osmo-run.probe=1"
"""Label of the one-off container asking an image its Python (removed as it exits)."""
_PROBE = (
    "import json, os, platform, sys\n"
    "try:\n    libc = os.confstr('CS_GNU_LIBC_VERSION')\nexcept (AttributeError, ValueError):\n"
    "    libc = None\n"
    "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'machine': "
    "platform.machine(), 'libc': libc, 'implementation': sys.implementation.name, "
    "'full_version': platform.python_version()}))\n"
)


@dataclass(frozen=True)
class TargetPython:
    """The interpreter wheels are chosen for: ``version`` (``3.11``), ``platforms`` (pip
    ``--platform`` values, most specific first) and the implementation (``cp``)."""

    version: str
    platforms: tuple[str, ...]
    implementation: str = "cp"
    full_version: str | None = None
    """``3.11.2`` when the image said; else ``version`` stands for ``version.0``."""

    def key(self) -> str:
        return f"{self.implementation}{self.version}-{'+'.join(self.platforms)}"

    def marker_environment(self) -> dict[str, str]:
        """PEP 508 marker variables of this interpreter (a Linux container's CPython),
        for :meth:`RequirementSet.for_interpreter`."""
        full = self.full_version or f"{self.version}.0"
        tag = self.platforms[0] if self.platforms else "x86_64"
        machine = re.sub(r"^(?:many|musl)?linux(?:_\d+_\d+|\d+)?_", "", tag)
        return {
            "implementation_name": "cpython",
            "implementation_version": full,
            "os_name": "posix",
            "platform_machine": machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": full,
            "python_version": self.version,
            "sys_platform": "linux",
        }

    def describe(self) -> str:
        return f"Python {self.version} on {self.platforms[0] if self.platforms else '?'}"


def platform_tags(machine: str, libc: str | None) -> tuple[str, ...]:
    """pip ``--platform`` values a ``machine`` with C library ``libc`` (``glibc 2.36``;
    ``None``: musl) runs: every manylinux level down to 2.5, or musllinux 1.2 to 1.1."""
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine.lower())
    match = re.fullmatch(r"glibc (\d+)\.(\d+)", libc or "")
    if match is None:
        return tuple(f"musllinux_1_{minor}_{arch}" for minor in (2, 1))
    major, minor = int(match[1]), int(match[2])
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 16, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{arch}" for level, name in legacy.items() if minor >= level]
    return tuple(tags)


async def image_python(image: str) -> TargetPython:
    """What the image's ``python3`` is (cached by image id under :func:`cache_dir`).

    Raises :class:`RequirementsError` when the image has no usable python3.
    """
    image_id = (await docker_ops.docker("image", "inspect", "--format", "{{.Id}}", image)).strip()
    cached = cache_dir() / "images" / f"{image_id.replace(':', '-')}.json"
    try:
        answer = json.loads(cached.read_text(encoding="utf-8"))
        if "full_version" not in answer:  # a record from before it was asked: ask again
            raise ValueError("stale record")
    except (OSError, ValueError, TypeError):
        try:
            run = ["run", "--rm", "--network", "none", "--label", PROBE_LABEL]
            output = await docker_ops.docker(*run, "--entrypoint", "python3", image, "-c", _PROBE)
            answer = json.loads(output.strip().splitlines()[-1])
        except (DockerCommandError, ValueError, IndexError) as exc:
            raise RequirementsError(
                f"requirements: cannot ask the trial image {image} its Python (`python3` "
                f"failed: {' '.join(str(exc).split())[-300:]}); the image needs python3 >= 3.11"
            ) from None
        with contextlib.suppress(OSError):  # an unwritable cache costs a probe next time
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(answer), encoding="utf-8")
    if answer.get("implementation") != "cpython":
        raise RequirementsError(
            f"requirements: the trial image {image} runs {answer.get('implementation')}, "
            "and wheels are chosen for CPython only; set `requirements: none`"
        )
    return TargetPython(
        str(answer["version"]),
        platform_tags(answer["machine"], answer["libc"]),
        full_version=str(answer["full_version"]),
    )


async def target_python(
    image: str | None, options: RequirementOptions, environment: str
) -> TargetPython:
    """The interpreter to choose wheels for: what the spec states
    (``requirements.python_version``, ``requirements.platforms``, default manylinux 2.28
    on x86_64), else what ``image`` (a local image) says.

    Raises :class:`RequirementsError` when neither is known: a remote environment's image
    cannot be asked from here.
    """
    if options.python_version is not None:
        platforms = options.platforms or platform_tags("x86_64", "glibc 2.28")
        return TargetPython(options.python_version, tuple(platforms))
    if image is None:
        raise RequirementsError(
            f"requirements: trials run in the {environment} environment, whose image this "
            "machine cannot ask its Python; set requirements.python_version (and "
            "requirements.platforms, e.g. [manylinux_2_36_x86_64]) in the spec"
        )
    return await image_python(image)


def _pip_target_args(target: TargetPython) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", target.version]
    args += ["--implementation", target.implementation]
    for platform in target.platforms:
        args += ["--platform", platform]
    return args


async def _pip(*args: str, timeout_sec: float = 1800.0) -> tuple[int, str]:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pip",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout_sec)
    except TimeoutError:
        process.kill()
        await process.wait()  # reap it: no zombie, no transport closed after the loop
        raise RequirementsError(f"requirements: pip took longer than {timeout_sec:g}s") from None
    return int(process.returncode or 0), output.decode("utf-8", "replace")


def pip_problem(output: str, target: TargetPython) -> str:
    """One line saying why ``pip download`` failed, naming the requirement."""
    if "No module named pip" in output:
        return (
            f"requirements: osmo-run's Python ({sys.executable}) has no pip, which fetches "
            "the trial's wheels; install it (`python -m ensurepip`) or set "
            "`requirements: none`"
        )
    missing = re.search(r"No matching distribution found for (\S+)", output)
    if missing:
        return (
            f"requirements: {missing[1]} has no wheel for the trial image's "
            f"{target.describe()} on this machine's package index (sdists are never built "
            "for a trial); pick a version that ships wheels, or install it in the task's "
            "image and set `requirements: none`"
        )
    conflict = re.search(r"(Cannot install .*?)(?:\n|$)", output)
    if conflict:
        return f"requirements: {conflict[1].strip()} (for the trial image's {target.describe()})"
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    last = errors[-1][len("ERROR:") :].strip() if errors else " ".join(output.split())[-300:]
    return f"requirements: pip could not fetch them for {target.describe()}: {last}"


async def _byte_compile(site: Path, target: TargetPython) -> bool:
    """Byte-compile ``site`` for ``target`` with this machine's interpreter of the same
    version, when it has one (``python3.11`` on PATH); return whether it did.

    Trials run with ``PYTHONDONTWRITEBYTECODE``, so without ``.pyc`` files every trial
    compiles what it imports again (measured: ``import agents`` in an uploaded trial took
    three times as long as from the byte-compiled prebuilt image). ``unchecked-hash``
    pycs stay valid whatever the extracted files' times: the set never changes.
    """
    python = shutil.which(f"python{target.version}")
    if python is None or target.implementation != "cp":
        return False
    tag = f"cpython-{target.version.replace('.', '')}"
    check = await asyncio.create_subprocess_exec(
        python, "-c", f"import sys; sys.exit(sys.implementation.cache_tag != {tag!r})"
    )
    if await check.wait() != 0:
        return False
    compile_all = await asyncio.create_subprocess_exec(
        python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
        str(site), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    return await compile_all.wait() == 0


def set_key(requirements: RequirementSet, target: TargetPython) -> str:
    """The cache key of one requirement set for one target interpreter."""
    return hashlib.sha256(f"{requirements.digest()}|{target.key()}".encode()).hexdigest()[:24]


async def _download(requirements: RequirementSet, target: TargetPython, key: str) -> Path:
    wheelhouse = cache_dir() / "wheelhouse" / key
    if (wheelhouse / ".complete").is_file():
        return wheelhouse  # a read-only cache filled before serves as it is
    wheelhouse = writable_cache_dir("wheelhouse") / key
    wheelhouse.mkdir(exist_ok=True)
    code, output = await _pip(
        "download",
        "-q",
        "-d",
        str(wheelhouse),
        *_pip_target_args(target),
        *requirements.requirements,
    )
    if code != 0:
        raise RequirementsError(pip_problem(output, target))
    (wheelhouse / ".complete").write_text("\n".join(requirements.requirements), encoding="utf-8")
    return wheelhouse


async def installed_site(requirements: RequirementSet, target: TargetPython) -> Path:
    """A tar archive of the requirements installed for ``target`` (``pip install --target``
    laid out as one ``site-packages``), built once per requirement set and target: the
    prebuilt image ``ADD``s it, uploads extract it in the trial.

    Only the requirements whose markers hold for ``target`` are installed (none: an
    empty set). Raises :class:`RequirementsError` (one line, naming the requirement) when
    pip cannot fetch or install them, and :class:`~osmo_run.errors.CacheDirError` when the
    cache must be written and cannot.
    """
    requirements = requirements.for_interpreter(target.marker_environment())
    key = set_key(requirements, target)
    archive_path = cache_dir() / "site" / f"{key}.tar"
    if archive_path.is_file():
        return archive_path
    archive_path = writable_cache_dir("site") / f"{key}.tar"
    wheelhouse = await _download(requirements, target, key) if requirements.requirements else None
    with tempfile.TemporaryDirectory(prefix=f".{key}-", dir=archive_path.parent) as scratch:
        site = Path(scratch) / "site"
        site.mkdir()
        code, output = (0, "") if wheelhouse is None else await _pip(
            "install", "-q", "--no-index", "--find-links", str(wheelhouse), "--no-compile",
            "--target", str(site), *_pip_target_args(target), *requirements.requirements,
        )  # fmt: skip
        if code != 0:
            raise RequirementsError(pip_problem(output, target))
        await _byte_compile(site, target)
        staged = Path(scratch) / SITE_ARCHIVE
        with tarfile.open(staged, "w") as archive:
            archive.add(site, arcname=".")
        staged.replace(archive_path)  # atomic: a concurrent run sees all of it or none
    return archive_path
