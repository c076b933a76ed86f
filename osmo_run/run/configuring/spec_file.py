"""A spec file read: YAML parsed safely and bounded, validated into a
:class:`~osmo_run.run.configuring.spec.RunSpec`, its relative paths anchored at its directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from osmo_run.errors import SpecError
from osmo_run.run.configuring.field_errors import format_validation_error
from osmo_run.run.configuring.spec import RunSpec

MAX_SPEC_VALUES = 100_000
"""How many values a spec may hold once its YAML aliases are expanded (a spec is a page of
settings; an alias bomb expands to billions, which validation would walk for hours)."""

MAX_SPEC_BYTES = 2**20
"""The most a spec file may hold (``--spec /dev/zero`` would otherwise never end)."""

MAX_SPEC_DEPTH = 64
"""How deeply a spec's values may nest."""


def read_spec_yaml(path: Path) -> Any:
    """The YAML document at ``path``, parsed safely and bounded in size and depth.

    Raises :class:`SpecError` naming the file (and line, for a syntax error) when it cannot
    be read, is larger than :data:`MAX_SPEC_BYTES`, is not YAML, nests deeper than
    :data:`MAX_SPEC_DEPTH` or expands through aliases (``&a`` / ``*a``) to more than
    :data:`MAX_SPEC_VALUES` values.
    """
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
        if len(data) > MAX_SPEC_BYTES:
            raise SpecError(
                f"{path}: larger than {MAX_SPEC_BYTES // 2**20} MiB; pass the YAML spec"
            )
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: spec file not found") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory; pass the spec's YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read spec: {exc}") from None
    too_deep = SpecError(
        f"{path}: values nest more than {MAX_SPEC_DEPTH} levels deep; flatten the settings"
    )
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{path}{where}: not valid YAML: {problem}") from None
    except RecursionError:
        raise too_deep from None
    sizes: dict[int, int] = {}

    def expanded_size(value: Any, depth: int) -> int:
        if depth > MAX_SPEC_DEPTH:
            raise too_deep
        if not isinstance(value, dict | list):
            return 1
        known = sizes.get(id(value))
        if known is not None:
            return known
        children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        size = 1
        for child in children:
            size += expanded_size(child, depth + 1)
            if size > MAX_SPEC_VALUES:
                raise SpecError(
                    f"{path}: the spec expands to more than {MAX_SPEC_VALUES:,} values through "
                    "YAML aliases (&name / *name); write the values out or make them smaller"
                )
        sizes[id(value)] = size
        return size

    expanded_size(data, 0)
    return data


def load_spec(path: Path) -> RunSpec:
    """Read and validate a YAML spec; relative paths become relative to its directory.

    Raises :class:`SpecError` naming the file and each invalid field.
    """
    data = read_spec_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(
            f"{path}: a spec is a YAML mapping with at least 'workflow: module:Class', "
            f"got {type(data).__name__}"
        )
    try:
        spec = RunSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(str(path), exc, RunSpec)) from None
    return anchor_paths(spec, path.parent)


def anchor_paths(spec: RunSpec, base: Path) -> RunSpec:
    """``spec`` with its relative paths made relative to ``base`` (the spec file's
    directory)."""

    def anchor(value: Path | None) -> Path | None:
        return None if value is None or value.is_absolute() else base / value

    harbor = spec.harbor.model_copy(
        update={
            "task_dir": anchor(spec.harbor.task_dir) or spec.harbor.task_dir,
            "tasks_root": anchor(spec.harbor.tasks_root) or spec.harbor.tasks_root,
            "trials_dir": anchor(spec.harbor.trials_dir) or spec.harbor.trials_dir,
        }
    )
    return spec.model_copy(
        update={
            "code_dir": anchor(spec.code_dir) or spec.code_dir,
            "output": anchor(spec.output) or spec.output,
            "harbor": harbor,
        }
    )
