"""What a trial environment needs from the host: the osmo-run SDK and the user's code.

Both are staged once per run into a directory (the SDK and the built-in graders, both
stdlib-only, not the CLI or backends; the user's code without virtual environments,
caches and VCS data) and then uploaded to each trial, or baked into the prebuilt image.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import osmo_run
from osmo_run.errors import InputError

CONTAINER_ROOT = "/opt/osmo-run"
CONTAINER_RUNTIME_DIR = f"{CONTAINER_ROOT}/runtime"
CONTAINER_CODE_DIR = f"{CONTAINER_ROOT}/code"
CONTAINER_DEPS_DIR = f"{CONTAINER_ROOT}/deps"
"""The workflow's requirements, installed (``site-packages`` layout), after the runtime on
the runner's ``PYTHONPATH``: the staged SDK always wins over a copy a requirement brings."""

EXCLUDED_NAMES = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "env",
        "__pycache__",
        "node_modules",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        ".tox",
        ".nox",
        "runs",
        "dist",
        "build",
        ".idea",
        ".vscode",
        ".DS_Store",
    }
)
"""Directory and file names never copied from the user's code directory."""

MAX_CODE_BYTES = 200 * 1024 * 1024


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {
        name
        for name in names
        if name in EXCLUDED_NAMES
        or name.endswith((".pyc", ".egg-info"))
        or Path(directory, name).is_symlink()
    }


RUNTIME_PACKAGES = ("sdk", "graders", "integrations")
"""The subpackages trials import: the SDK and the built-in graders (stdlib-only; their
optional libraries, math-verify and jsonschema, come with the image or the requirements),
and the agent-framework integrations (whose frameworks come with the requirements)."""


def stage_runtime(dest: Path) -> Path:
    """Copy the SDK, the built-in graders and the integrations (``osmo_run/__init__.py``,
    ``errors.py``, :data:`RUNTIME_PACKAGES`) under ``dest``."""
    package = Path(osmo_run.__file__).parent
    target = dest / "osmo_run"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("__init__.py", "errors.py"):
        shutil.copy2(package / name, target / name)
    for name in RUNTIME_PACKAGES:
        shutil.copytree(package / name, target / name, ignore=_ignore, dirs_exist_ok=True)
    return dest


def _git_files(source: Path) -> list[Path] | None:
    """Files git would commit under ``source`` (tracked, or untracked and not ignored);
    ``None`` when ``source`` is not in a git work tree."""
    try:
        listing = subprocess.run(
            [
                "git",
                "-C",
                str(source),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [Path(name) for name in listing.decode("utf-8", "surrogateescape").split("\0") if name]


def _walk_files(source: Path) -> list[Path]:
    files = []
    for root, dirs, names in os.walk(source):
        dirs[:] = [d for d in dirs if d not in _ignore(root, dirs)]
        kept = set(names) - _ignore(root, names)
        files += [Path(root, name).relative_to(source) for name in sorted(kept)]
    return files


def stage_user_code(source: Path, dest: Path) -> Path:
    """Copy the user's code from ``source`` to ``dest``: in a git work tree the files git
    would commit (so .gitignore applies), elsewhere every file; never caches, virtual
    environments, VCS data or links.

    Raises :class:`InputError` when ``source`` is not a directory or the files exceed
    ``MAX_CODE_BYTES`` (checked before anything is copied).
    """
    if not source.is_dir():
        raise InputError(f"{source}: --user-code-dir must be a directory")
    files = _git_files(source)
    if not files:  # not a work tree, or a directory git ignores whole: take every file
        files = _walk_files(source)
    files = [
        f
        for f in files
        if not set(f.parts) & EXCLUDED_NAMES
        and not f.name.endswith(".pyc")
        and (source / f).is_file()
        and not (source / f).is_symlink()
    ]
    size = sum((source / f).stat().st_size for f in files)
    if size > MAX_CODE_BYTES:
        raise InputError(
            f"{source}: the user code directory holds {size / 2**20:.0f} MB after leaving out "
            "ignored files, caches and virtual environments; pass a narrower --user-code-dir "
            "(the directory holding your workflow's package)"
        )
    for relative in files:
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / relative, target)
    dest.mkdir(parents=True, exist_ok=True)
    return dest


def tree_digest(*roots: Path) -> str:
    """A content hash of every file under ``roots`` (paths and bytes), for image tags."""
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
