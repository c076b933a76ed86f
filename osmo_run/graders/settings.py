"""Typed settings for the built-in graders, checked with the standard library alone.

Graders also run inside Harbor trials, where only the stdlib SDK is installed, so their
settings cannot be pydantic models. Each grader declares its settings as a keyword-only
dataclass; :func:`parse_settings` checks a mapping (the spec's ``grader_config.settings``)
against it and names the offending field: ``settings.tolerance: must be a number, got
'x'``. Supported field types: ``bool``, ``int``, ``float``, ``str``, ``Any``,
``Literal[...]``, ``X | None`` and other unions, ``list[X]``, ``dict[str, X]`` and nested
settings dataclasses. A dataclass may define ``check(self)`` for rules that span fields or
need more than a type (a regex that compiles, a bound), raising :class:`SettingsError`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")


class SettingsError(ValueError):
    """A setting is invalid; ``path`` names it relative to ``settings`` (``a.b[2].c``)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        where = f"settings.{path}" if path else "settings"
        super().__init__(f"{where}: {problem}")


def join_path(base: str, part: str | int) -> str:
    """``base`` extended by a field name or a list index."""
    if isinstance(part, int):
        return f"{base}[{part}]"
    return f"{base}.{part}" if base else part


def parse_settings(cls: type[T], data: object, path: str = "") -> T:
    """An instance of the settings dataclass ``cls`` built from ``data``.

    Raises :class:`SettingsError` naming the field for a value of the wrong type, an
    unknown key (with the nearest known one), a missing required key, or whatever the
    dataclass's ``check()`` rejects.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SettingsError(path, f"must be a mapping of settings, got {_shown(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(fields)}"
            raise SettingsError(join_path(path, str(key)), f"unknown setting; {hint}")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for name, field in fields.items():
        if name in data:
            values[name] = _coerce(hints[name], data[name], join_path(path, name))
        elif field.default is dataclasses.MISSING and (
            field.default_factory is dataclasses.MISSING
        ):
            raise SettingsError(join_path(path, name), "required setting is missing")
    settings = cls(**values)
    check = getattr(settings, "check", None)
    if check is not None:
        try:
            check()
        except SettingsError as exc:
            raise SettingsError(
                join_path(path, exc.path) if exc.path else path, exc.problem
            ) from None
    return settings


def _shown(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _describe(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "an integer"
    if annotation is float:
        return "a number"
    if annotation is str:
        return "a string"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    if origin is list:
        return "a list"
    if origin is dict or dataclasses.is_dataclass(annotation):
        return "a mapping"
    return str(annotation)


def _float_text(value: str, path: str) -> float:
    """A number written as text: YAML 1.1 (PyYAML) reads ``1e-6`` as the string '1e-6',
    so a number field takes what the spec's other number fields (pydantic's) take."""
    try:
        return float(value)
    except ValueError:
        raise SettingsError(path, f"must be a number, got {_shown(value)}") from None


def _coerce(annotation: Any, value: object, path: str) -> Any:
    """``value`` checked against ``annotation`` (ints are accepted as floats)."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, path)
            except SettingsError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise SettingsError(path, f"must be {_describe(annotation)}, got {_shown(value)}")
    if origin is Literal:
        allowed = typing.get_args(annotation)
        if value not in allowed or isinstance(value, bool) != isinstance(allowed[0], bool):
            close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SettingsError(path, f"must be {_describe(annotation)}, got {value!r}{hint}")
        return value
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return parse_settings(annotation, value, path)
    if origin is list:
        if not isinstance(value, list):
            raise SettingsError(path, f"must be a list, got {_shown(value)}")
        (item,) = typing.get_args(annotation)
        return [_coerce(item, v, join_path(path, i)) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise SettingsError(path, f"must be a mapping, got {_shown(value)}")
        _, item = typing.get_args(annotation)
        return {str(k): _coerce(item, v, join_path(path, str(k))) for k, v in value.items()}
    if annotation is bool:
        if not isinstance(value, bool):
            raise SettingsError(path, f"must be true or false, got {_shown(value)}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(path, f"must be an integer, got {_shown(value)}")
        return value
    if annotation is float:
        if isinstance(value, str):
            value = _float_text(value, path)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SettingsError(path, f"must be a number, got {_shown(value)}")
        if not math.isfinite(value):
            raise SettingsError(path, f"must be a finite number, got {value}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise SettingsError(path, f"must be a string, got {_shown(value)}")
        return value
    raise TypeError(f"settings field {path}: unsupported annotation {annotation!r}")
