"""Resolve ``"module:attr"`` import paths to workflow and grader classes."""

from __future__ import annotations

import difflib
import importlib
import sys
from pathlib import Path
from typing import Any

from osmo_run.errors import DependencyImportError, ImportPathError

_EXTRAS = {"agents": "openai-agents", "strands": "strands", "xllamacpp": "embedded"}
"""Modules an osmo-run extra installs: a workflow missing one is told which extra."""

__all__ = [
    "DependencyImportError",
    "ensure_on_path",
    "import_path_of",
    "load_object",
    "resolve_class",
]


def ensure_on_path(code_dir: Path) -> None:
    """Put ``code_dir`` first on ``sys.path`` so the user's modules import from it."""
    entry = str(code_dir.resolve())
    if entry not in sys.path:
        sys.path.insert(0, entry)


def load_object(path: str, field: str) -> object:
    """Import ``"package.module:attr"``; raise :class:`ImportPathError` naming ``field``."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ImportPathError(f"{field}: {path!r} is not of the form 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ImportPathError(
                f"{field}: cannot import module {module_name!r} (no module named {exc.name!r}); "
                f"check the spelling and that its directory is the code dir (sys.path[0]: "
                f"{sys.path[0]})"
            ) from None
        extra = _EXTRAS.get((exc.name or "").partition(".")[0])
        hint = f"pip install 'osmo-run[{extra}]'" if extra else "install what it needs"
        raise DependencyImportError(
            f"{field}: importing {module_name!r} failed: {exc}; {hint}"
        ) from None
    except Exception as exc:
        raise ImportPathError(
            f"{field}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportPathError(
                f"{field}: module {module_name!r} has no attribute {attr!r}"
                + _did_you_mean(part, obj)
            ) from None
    return obj


def _did_you_mean(name: str, owner: object) -> str:
    """``"; did you mean 'X'?"`` for the public name of ``owner`` nearest to ``name``."""
    names = getattr(owner, "__all__", None) or [n for n in dir(owner) if not n.startswith("_")]
    close = difflib.get_close_matches(name, [str(n) for n in names], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def resolve_class(source: object, base: type[Any], field: str) -> Any:
    """Resolve ``source`` (a class, an instance or a ``"module:attr"`` path) to a subclass or
    an instance of ``base``; raise :class:`ImportPathError` for anything else."""
    obj = load_object(source, field) if isinstance(source, str) else source
    if isinstance(obj, type) and issubclass(obj, base):
        abstract = getattr(obj, "__abstractmethods__", None)
        if abstract:
            missing = ", ".join(sorted(abstract))
            raise ImportPathError(f"{field}: {obj.__name__} does not implement {missing}")
        return obj
    if isinstance(obj, base):
        return obj
    described = obj.__name__ if isinstance(obj, type) else type(obj).__name__
    where = f" ({source})" if isinstance(source, str) else ""
    raise ImportPathError(
        f"{field}: {described}{where} is not a {base.__name__} subclass; "
        f"subclass osmo_run.{base.__name__}"
    )


def import_path_of(source: object, base: type[Any], field: str, tolerate_missing_deps: bool) -> str:
    """The ``"module:attr"`` path of ``source`` (a class, or a path checked on this host).

    With ``tolerate_missing_deps``, a path whose module imports a dependency this host
    lacks is accepted as is (it may exist in a sandbox image). Raises
    :class:`ImportPathError` otherwise.
    """
    if isinstance(source, str):
        try:
            resolve_class(source, base, field)
        except DependencyImportError:
            if not tolerate_missing_deps:
                raise
        return source
    obj = resolve_class(source, base, field)
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"
