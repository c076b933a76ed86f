"""osmo-run's cache on this machine: wheelhouses, installed requirements, what each image
is, and when each image osmo-run built was last used (which ``cleanup --images`` reads)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from osmo_run.errors import CacheDirError

CACHE_ENV = "OSMO_RUN_CACHE_DIR"


def cache_dir() -> Path:
    """``$OSMO_RUN_CACHE_DIR``, else the user cache dir (``~/.cache/osmo-run`` on Linux)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    import platformdirs

    return Path(platformdirs.user_cache_dir("osmo-run"))


def writable_cache_dir(name: str) -> Path:
    """The cache's subdirectory ``name``, created if missing, checked writable.

    Raises :class:`CacheDirError` (one line naming the directory and what to do) when it
    cannot be created or written: a read-only mount, another user's directory, a file.
    """
    directory = cache_dir() / name
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise CacheDirError(
            f"{directory}: osmo-run's cache directory cannot be written "
            f"({exc.strerror or type(exc).__name__}); set {CACHE_ENV} to a writable directory "
            "or make this one writable"
        ) from None
    return directory


def _use_record(tag: str) -> Path:
    return cache_dir() / "image-uses" / re.sub(r"[^A-Za-z0-9_.-]", "_", tag)


def note_image_used(tag: str) -> None:
    """Record that a run uses image ``tag`` now (the record's modification time). Never
    raises: a read-only cache costs only the record."""
    record = _use_record(tag)
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(tag, encoding="utf-8")
    except OSError:
        pass


def last_used(tag: str) -> float | None:
    """When a run last used image ``tag`` (epoch seconds), ``None`` if no run recorded it."""
    try:
        return _use_record(tag).stat().st_mtime
    except OSError:
        return None


def forget_image(tag: str) -> None:
    try:
        _use_record(tag).unlink()
    except OSError:
        pass
