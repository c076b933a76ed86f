"""osmo-run's cache on this machine: wheelhouses, installed requirements, what each image
is, and when each image osmo-run built was last used (which ``cleanup --images`` reads)."""

from __future__ import annotations

import os
import re
from pathlib import Path

CACHE_ENV = "OSMO_RUN_CACHE_DIR"


def cache_dir() -> Path:
    """``$OSMO_RUN_CACHE_DIR``, else the user cache dir (``~/.cache/osmo-run`` on Linux)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    import platformdirs

    return Path(platformdirs.user_cache_dir("osmo-run"))


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
