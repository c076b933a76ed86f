"""What a trial environment needs from the host: the osmo-run SDK and the user's code.

Both are staged once per run into a directory (the SDK alone, not the CLI or backends;
the user's code without virtual environments, caches and VCS data) and then uploaded to
each trial, or baked into the prebuilt image.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import osmo_run
from osmo_run.errors import InputError

CONTAINER_ROOT = "/opt/osmo-run"
CONTAINER_RUNTIME_DIR = f"{CONTAINER_ROOT}/runtime"
CONTAINER_CODE_DIR = f"{CONTAINER_ROOT}/code"

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


def stage_runtime(dest: Path) -> Path:
    """Copy the SDK (``osmo_run/__init__.py``, ``errors.py``, ``sdk/``) under ``dest``."""
    package = Path(osmo_run.__file__).parent
    target = dest / "osmo_run"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("__init__.py", "errors.py"):
        shutil.copy2(package / name, target / name)
    shutil.copytree(package / "sdk", target / "sdk", ignore=_ignore, dirs_exist_ok=True)
    return dest


def stage_user_code(source: Path, dest: Path) -> Path:
    """Copy ``source`` to ``dest`` without caches, virtual environments, VCS data or links.

    Raises :class:`InputError` when ``source`` is not a directory or the copy exceeds
    ``MAX_CODE_BYTES`` (pass a narrower ``--user-code-dir``).
    """
    if not source.is_dir():
        raise InputError(f"{source}: --user-code-dir must be a directory")
    shutil.copytree(source, dest, ignore=_ignore, dirs_exist_ok=True)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    if size > MAX_CODE_BYTES:
        raise InputError(
            f"{source}: the user code directory holds {size / 2**20:.0f} MB after leaving out "
            "caches and virtual environments; pass a narrower --user-code-dir (the directory "
            "holding your workflow's package)"
        )
    return dest


def tree_digest(*roots: Path) -> str:
    """A content hash of every file under ``roots`` (paths and bytes), for image tags."""
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
