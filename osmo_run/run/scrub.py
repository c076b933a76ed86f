"""Secrets out of the directories a backend keeps for a row.

A kept Harbor trial directory holds files osmo-run does not write (Harbor's ``trial.log``,
``exception.txt``, ``result.json``, the agent's own logs). A provider's error can quote a
credential there (a Daytona API key in a rejected request, say). Once the row is finished,
every secret is replaced by ``***`` in each file of the directory, as in the run's own files.
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_SCRUBBED_BYTES = 64 * 1024 * 1024
"""Larger files are left as they are (and named in the row's warnings): reading a huge log
whole to mask a key would cost more than the row."""


def scrub_directory(directory: Path, secrets: tuple[str, ...]) -> list[str]:
    """Replace each of ``secrets`` by ``***`` in every regular file below ``directory``
    (symbolic links are not followed); return warnings for files that could not be
    scrubbed. Nothing happens without secrets."""
    needles = [secret.encode("utf-8") for secret in secrets if secret]
    if not needles:
        return []
    warnings: list[str] = []
    for root, _dirs, files in os.walk(directory):
        for name in files:
            path = Path(root) / name
            problem = _scrub_file(path, needles)
            if problem:
                warnings.append(f"{path}: {problem}")
    return warnings


def _scrub_file(path: Path, needles: list[bytes]) -> str | None:
    try:
        if path.is_symlink() or not path.is_file():
            return None
        if path.stat().st_size > MAX_SCRUBBED_BYTES:
            return "too large to check for secrets; it may hold one"
        data = path.read_bytes()
        scrubbed = data
        for needle in needles:
            scrubbed = scrubbed.replace(needle, b"***")
        if scrubbed != data:
            path.write_bytes(scrubbed)
    except OSError as exc:
        return f"could not be checked for secrets: {exc.strerror or exc}"
    return None
