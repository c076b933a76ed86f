"""A model's validation errors as one line per field, with the close name a typo missed."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError


def _field_names(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The valid field names at ``loc`` (without its last element) in ``model``."""
    current: Any = model
    for part in loc[:-1]:
        field = getattr(current, "model_fields", {}).get(part)
        annotation = field.annotation if field is not None else None
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if current is None:
            return []
    return list(getattr(current, "model_fields", {}))


_OWN_SETTINGS = {"workflow_config": "workflow", "grader_config": "grader"}
_SCALAR_TYPES = frozenset({"int_type", "float_type", "bool_type"})


def format_validation_error(source: str, exc: ValidationError, model: type[BaseModel]) -> str:
    """One line per problem: ``source: field 'a.b': what is wrong[; did you mean 'x'?]``."""
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown field"
            close = difflib.get_close_matches(str(loc[-1]), _field_names(model, loc), n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
            elif len(loc) == 2 and loc[0] in _OWN_SETTINGS:
                message += (
                    f"; put the {_OWN_SETTINGS[str(loc[0])]}'s own options under {loc[0]}.settings"
                )
        elif error["type"] == "missing":
            message = "required field is missing"
        elif error["type"] in _SCALAR_TYPES and isinstance(error.get("input"), str):
            message += f" (got the string {error['input']!r}; write the value without quotes)"
        lines.append(f"{source}: field {where!r}: {message}")
    return "\n".join(lines)
