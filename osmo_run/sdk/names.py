"""Names for files, directories and containers derived from row ids, which are opaque data.

A dataset's ids are any non-empty strings (``gsm8k/train/17``, ``../../x``, 300 characters,
a NUL): they are kept exactly in every output, and never used as a path. Where a rollout
names a directory (its artifacts) osmo-run uses :func:`safe_name` of its row id, and a
Harbor trial or Docker object uses :func:`docker_part` of that.

Guarantees of :func:`safe_name`:

* one path segment: only ``[a-z0-9._-]``, never starting with ``.`` or ``-``, so it never
  leaves its parent directory and is not hidden;
* lowercase, so two names never clash on a case-insensitive file system (macOS, Windows);
* at most :data:`MAX_SAFE_NAME` characters;
* an id that already is such a name is its own name (``calc-01`` stays ``calc-01``); any
  other becomes a readable slug plus 16 hex digits of its SHA-256 (``gsm8k-train-17-…``),
  so two ids share a name only when one is an id spelt like the other's name, or on a
  64-bit hash collision. The dataset check refuses both before anything runs.

A rollout of a row run several times is ``<name>~<k>``: ``~`` is in no safe name, so
rollout names are unique when row names are. Stdlib only: the SDK runs in sandboxes.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

MAX_SAFE_NAME = 80
"""Longest safe name: far under file systems' 255 bytes, with room for ``~<sample>``."""
_SLUG_LENGTH = 40
_HASH_DIGITS = 16
_PLAIN = re.compile(r"[a-z0-9_][a-z0-9._-]*")
_NOT_SLUG = re.compile(r"[^a-z0-9_]+")
_NOT_DOCKER = re.compile(r"[^a-z0-9]+")


def _slug(text: str, pattern: re.Pattern[str], length: int) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return pattern.sub("-", ascii_text.lower()).strip("-_")[:length].rstrip("-_")


def safe_name(row_id: str) -> str:
    """The file-system name of the row ``row_id`` (see the module docstring): ``row_id``
    itself when it is a lowercase name of ``[a-z0-9._-]`` up to :data:`MAX_SAFE_NAME`
    characters not starting with ``.`` or ``-``; else ``<slug>-<16 hex digits>``."""
    if len(row_id) <= MAX_SAFE_NAME and _PLAIN.fullmatch(row_id):
        return row_id
    digest = hashlib.sha256(row_id.encode("utf-8", "surrogatepass")).hexdigest()
    slug = _slug(row_id, _NOT_SLUG, _SLUG_LENGTH) or "id"
    return f"{slug}-{digest[:_HASH_DIGITS]}"


def rollout_name(row_name: str, sample_index: int | None) -> str:
    """The name of one rollout of the row named ``row_name``: the row's name for a row run
    once (``sample_index`` ``None``), else ``<row_name>~<sample_index>``."""
    return row_name if sample_index is None else f"{row_name}~{sample_index}"


def docker_part(name: str, length: int = 24) -> str:
    """``name`` cut to what Docker and Compose accept inside a longer name: lowercase
    letters, digits and ``-``, at most ``length`` characters, never empty (``row``).
    Not unique on its own: callers add a sequence number or an invocation id."""
    return _slug(name, _NOT_DOCKER, length) or "row"
