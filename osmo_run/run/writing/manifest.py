"""What defines a run, and the run id derived from it.

The manifest splits a run's settings into *defining* fields, which change results and
so must match for ``--resume``, and *informational* ones (concurrency, display, paths,
versions, code digest) that never block a resume. The run id hashes the defining fields
(the dataset by content, not by path), so the same spec on the same data finds the same
run directory.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from osmo_run.errors import InputError

MANIFEST_VERSION = 1


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


@dataclass
class Manifest:
    """A run's identity. ``defining`` must match to resume; ``info`` is for people."""

    defining: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)
    dataset_name: str = "run"

    @property
    def digest(self) -> str:
        return hashlib.sha256(_canonical(self.defining).encode()).hexdigest()

    @property
    def run_id(self) -> str:
        """``<dataset stem>-<12 hex digits of the defining fields' hash>``."""
        return f"{self.dataset_name}-{self.digest[:12]}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": MANIFEST_VERSION,
            "run_id": self.run_id,
            "dataset_name": self.dataset_name,
            "defining": self.defining,
            "info": self.info,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: Path) -> Manifest:
        """Raises :class:`InputError` for a manifest of an unknown version or shape."""
        if data.get("schema_version") != MANIFEST_VERSION or not isinstance(
            data.get("defining"), dict
        ):
            raise InputError(f"{source}: not an osmo-run manifest of version {MANIFEST_VERSION}")
        return cls(
            defining=data["defining"],
            info=dict(data.get("info") or {}),
            dataset_name=str(data.get("dataset_name") or "run"),
        )

    def differences(self, other: Manifest) -> list[str]:
        """Field-by-field changes of the defining fields from ``other`` to ``self``."""
        before, after = _flatten(other.defining), _flatten(self.defining)
        lines = []
        for key in sorted(before.keys() | after.keys()):
            if key not in after:
                lines.append(f"  {key}: {before[key]!r} -> (removed)")
            elif key not in before:
                lines.append(f"  {key}: (absent) -> {after[key]!r}")
            elif _canonical(before[key]) != _canonical(after[key]):
                lines.append(f"  {key}: {before[key]!r} -> {after[key]!r}")
        return lines


def read_manifest(path: Path) -> Manifest | None:
    """The manifest at ``path``, ``None`` if there is none; :class:`InputError` if unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read the run manifest: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not an osmo-run manifest")
    return Manifest.from_dict(data, path)


def write_manifest(path: Path, manifest: Manifest) -> None:
    """Write atomically (a crash never leaves half a manifest)."""
    data = manifest.to_dict()
    data["info"] = {**data["info"], "written_at": datetime.now(UTC).isoformat()}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
