"""Column mapping: datasets whose columns are not named the osmo-run way, read as they are.

The spec's ``dataset`` section names, for each role, the column that plays it (the model is
inspect_ai's ``FieldSpec``)::

    dataset: {id: uid, prompt: question, label: answer, metadata: [source, difficulty]}

A column is a name, or a dotted path into nested columns (``reward_model.ground_truth``; a
segment may index a list, ``prompt.0.content``; a CSV cell holding a JSON object can be
entered too). A name that is itself a column (a CSV header ``a.b``) is that column.

* A role the mapping names takes its value from that column; a role it does not name keeps
  its standard columns (``id``; ``messages``/``prompt``/``user_prompt``/``system_prompt``;
  ``label``/``ground_truth``; ``metadata``).
* ``metadata`` lists the columns that make up the row's metadata, each under the name it is
  given by. Without it, the metadata is what it is without a mapping (the ``metadata``
  column plus every other column), less the columns a role took whole; a standard column
  whose role the mapping gave to another column is kept in the metadata under its name.
* A preset (``preset: verl``) is a mapping by name; the fields beside it override it.

A column that a CSV header or Parquet schema does not have is refused before any row,
naming it and the columns there are; in JSONL, the row that lacks it is a bad row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from osmo_run.run.reading.rows import KNOWN_COLUMNS, RowError, loads, metadata_object, shown

_ROLES = ("id", "prompt", "system_prompt", "label")
_STANDARD: dict[str, tuple[str, ...]] = {
    "id": ("id",),
    "prompt": ("messages", "prompt", "user_prompt", "system_prompt"),
    "system_prompt": ("system_prompt",),
    "label": ("label", "ground_truth"),
}
"""The standard columns of each role: moved aside when the mapping gives the role another."""


@dataclass(frozen=True)
class ColumnMap:
    """Which column plays each role (``None``: the standard columns); see the module
    docstring. ``metadata`` ``None`` keeps the standard metadata rule."""

    id: str | None = None
    prompt: str | None = None
    system_prompt: str | None = None
    label: str | None = None
    metadata: tuple[str, ...] | None = None

    def is_empty(self) -> bool:
        # per row (apply): plain attribute reads, not dataclasses.fields()
        return (
            self.id is None
            and self.prompt is None
            and self.system_prompt is None
            and self.label is None
            and self.metadata is None
        )

    def paths(self) -> list[tuple[str, str]]:
        """``(field, column path)`` of every column the mapping names."""
        named = [(role, getattr(self, role)) for role in _ROLES if getattr(self, role)]
        return named + [("metadata", path) for path in self.metadata or ()]

    def role_columns(self) -> dict[str, str]:
        """Role -> the top-level column that plays it whole: the mapped ones, and the
        standard column of each role the mapping leaves alone (``prompt`` for prompt)."""
        named = {role: getattr(self, role) for role in _ROLES if getattr(self, role)}
        roles = {role: path for role, path in named.items() if "." not in path}
        for column in ("id", "prompt", "messages", "user_prompt", "system_prompt"):
            role = "prompt" if column in ("messages", "user_prompt") else column
            if role not in named:
                roles.setdefault(column, column)
        return roles

    def check_columns(self, where: str, names: list[str]) -> None:
        """Refuse a mapping naming a column the file's header or schema ``names`` lacks.

        Raises :class:`RowError` (the caller adds the file) naming the spec field, the
        column, and the columns there are.
        """
        for field_name, path in self.paths():
            if path not in names and path.split(".")[0] not in names:
                listed = ", ".join(repr(name) for name in names)
                raise RowError(
                    f"{where}: the spec's dataset.{field_name} names column {path!r}, which "
                    f"the file does not have; its columns are {listed}"
                )

    def apply(self, obj: object) -> object:
        """The row ``obj`` with the mapped columns in the standard places, for
        :func:`~osmo_run.run.reading.rows.parse_row`; a row that is not an object as it is.

        Raises :class:`RowError` for a mapped column the row lacks.
        """
        if not isinstance(obj, dict) or self.is_empty():
            return obj
        mapped = {role: lookup(obj, getattr(self, role)) for role in _ROLES if getattr(self, role)}
        taken = {getattr(self, role) for role in mapped} & obj.keys()
        rest = {k: v for k, v in obj.items() if k not in taken}
        aside = {k: rest.pop(k) for role in mapped for k in _STANDARD[role] if k in rest}
        if self.metadata is not None:
            metadata = {path: lookup(obj, path) for path in self.metadata}
            rest = {k: v for k, v in rest.items() if k in KNOWN_COLUMNS and k != "metadata"}
        else:
            metadata = _merged(rest, aside)
        row: dict[str, Any] = {**rest, "metadata": metadata}
        if "prompt" in mapped and "system_prompt" in mapped:
            row["user_prompt"], row["system_prompt"] = mapped["prompt"], mapped["system_prompt"]
        elif "system_prompt" in mapped:
            row["system_prompt"] = mapped["system_prompt"]
        elif "prompt" in mapped:
            row["prompt"] = mapped["prompt"]
        for role in ("id", "label"):
            if role in mapped:
                row[role] = mapped[role]
        return row


def _merged(rest: dict[str, Any], aside: dict[str, Any]) -> dict[str, Any]:
    """The standard metadata of ``rest`` (its ``metadata`` column and its other columns)
    with the standard columns moved ``aside`` added under their names; ``rest`` keeps only
    the standard columns of roles the mapping left alone."""
    metadata = dict(metadata_object(rest.pop("metadata", None)))
    extra = {key: rest.pop(key) for key in [k for k in rest if k not in KNOWN_COLUMNS]}
    for key, value in {**extra, **aside}.items():
        if key in metadata and metadata[key] != value:
            raise RowError(
                f"'{key}' is a column and a 'metadata' key with different values "
                f"({shown(value)} and {shown(metadata[key])}): keep one of them"
            )
        metadata[key] = value
    return metadata


def lookup(obj: dict[str, Any], path: str) -> Any:
    """The value at ``path`` in the row ``obj`` (see the module docstring).

    Raises :class:`RowError` naming the path and what the row has where it stops.
    """
    if path in obj:
        return obj[path]
    value: Any = obj
    walked: list[str] = []
    for part in path.split("."):
        if isinstance(value, str) and value.lstrip().startswith(("{", "[")):
            try:
                value = loads(value)  # a CSV cell holding JSON
            except json.JSONDecodeError:
                pass
            except RowError as exc:
                raise RowError(f"column {path!r}: {exc}") from None
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise RowError(_missing(path, walked, value))
        walked.append(part)
    return value


def _missing(path: str, walked: list[str], value: Any) -> str:
    if not walked:
        return f"column {path!r} is not in this row; its columns are {_keys(value)}"
    where = ".".join(walked)
    if isinstance(value, dict):
        return f"column {path!r} is not in this row: {where!r} has {_keys(value)}"
    return f"column {path!r} is not in this row: {where!r} is {shown(value)}, not an object"


def _keys(value: dict[str, Any]) -> str:
    return ", ".join(repr(key) for key in value) or "none"


PRESETS: dict[str, ColumnMap] = {
    "verl": ColumnMap(prompt="prompt", label="reward_model.ground_truth"),
}
"""Named mappings. ``verl``: verl's RL Parquet rows (``data_source``, ``prompt`` as a list
of messages, ``ability``, ``reward_model: {style, ground_truth}``, ``extra_info``): the
prompt, ``reward_model.ground_truth`` as the label, every column in the metadata."""


def column_map(preset: str | None, **given: Any) -> ColumnMap:
    """The mapping of ``preset`` (``None``: none) with the ``given`` fields that are not
    ``None`` laid over it; ``metadata`` as a list or a tuple."""
    base = PRESETS[preset] if preset is not None else ColumnMap()
    updates = {key: value for key, value in given.items() if value is not None}
    if "metadata" in updates:
        updates["metadata"] = tuple(updates["metadata"])
    return replace(base, **updates)
