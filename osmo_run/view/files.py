"""Files from inside a run directory, and nothing else.

A requested path is refused (``None``, which the server answers with 404) when it is empty,
absolute, holds ``..`` or a backslash or a NUL, or resolves (symlinks followed) to anything
but a regular file inside the run directory. Starlette hands routes the percent-decoded
path, so ``%2e%2e%2f`` arrives here as ``../`` and is refused like it.

A served file is never rendered as a page: text is ``text/plain``, the raster image types
are sent as images, anything else (HTML, SVG, binaries) as a download.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

TEXT_PREVIEW = 64 * 1024
MAX_LISTED = 500
_IMAGE_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def resolve_inside(root: Path, relative: str) -> Path | None:
    """The regular file ``relative`` names under ``root``, or ``None`` when it is not one."""
    if not relative or "\x00" in relative or "\\" in relative or relative.startswith("/"):
        return None
    parts = PurePosixPath(relative).parts
    if not parts or any(part in {"..", "."} for part in parts):
        return None
    try:
        base = root.resolve(strict=True)
        target = (base / relative).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):  # ValueError: a NUL in a recorded path
        return None
    if not target.is_relative_to(base) or not target.is_file():
        return None
    return target


def relative_inside(root: Path, path: Path) -> str | None:
    """``path`` relative to ``root`` when it lies inside it (symlinks resolved), else ``None``."""
    try:
        base = root.resolve(strict=True)
        target = path.resolve(strict=True)
    except (OSError, RuntimeError, ValueError):  # ValueError: a NUL in a recorded path
        return None
    return target.relative_to(base).as_posix() if target.is_relative_to(base) else None


def sniff(head: bytes) -> str:
    """``text``, ``image/...`` or ``binary`` from a file's first bytes."""
    for signature, kind in _IMAGE_SIGNATURES:
        if head.startswith(signature):
            return kind
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if b"\x00" in head:
        return "binary"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # a character cut at the end of the sample is fine
            return "binary"
    return "text"


@dataclass(frozen=True)
class FileEntry:
    """A file under a run directory: its path relative to the run directory."""

    relative: str
    size: int
    kind: str

    @property
    def is_image(self) -> bool:
        return self.kind.startswith("image/")


def list_files(root: Path, folder: Path) -> list[FileEntry]:
    """Regular files under ``folder`` (inside ``root``), sorted, at most :data:`MAX_LISTED`;
    symlinks leading out of ``root`` are left out."""
    if relative_inside(root, folder) is None or not folder.is_dir():
        return []
    entries: list[FileEntry] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            relative = relative_inside(root, path)
            if relative is None or not path.is_file():
                continue
            try:
                with open(path, "rb") as handle:
                    head = handle.read(512)
                size = path.stat().st_size
            except OSError:
                continue
            entries.append(FileEntry(relative, size, sniff(head)))
            if len(entries) >= MAX_LISTED:
                return entries
    return entries


def text_preview(path: Path, limit: int = TEXT_PREVIEW) -> tuple[str, bool]:
    """The file's first ``limit`` bytes as text, and whether it was cut."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    return data[:limit].decode("utf-8", "replace"), len(data) > limit
