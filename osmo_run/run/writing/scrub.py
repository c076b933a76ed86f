"""Secrets out of the directories a backend keeps for a row.

A kept Harbor trial directory holds files osmo-run does not write (Harbor's ``trial.log``,
``exception.txt``, ``result.json``, the agent's own logs). A provider's error can quote a
credential there (a Daytona API key in a rejected request, say). Once the row is finished,
every secret is replaced by ``***`` in each file of the directory, as in the run's own files.
A file is rewritten through a temporary file renamed over it, so it is never left half
written.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
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
            _replace_contents(path, scrubbed)
    except OSError as exc:
        return f"could not be checked for secrets: {exc.strerror or exc}"
    return None


def _replace_contents(path: Path, data: bytes) -> None:
    """Make ``data`` the contents of ``path``, whole or not at all: written to a temporary
    file beside it with its mode, then renamed over it (a full disk or a stopped process
    leaves the original, not a truncated file). Raises :class:`OSError`."""
    mode = stat.S_IMODE(path.stat().st_mode)
    descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    temporary = Path(name)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        temporary.chmod(mode)  # mkstemp makes it 0600
        temporary.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
