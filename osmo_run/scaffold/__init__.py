"""``osmo-run init``'s project: a package with a workflow and a grader, a spec, a five-row
dataset, a ``pyproject.toml`` and a test, rendered from the files in ``template/``.

A template file's ``{{package}}``, ``{{name}}`` and ``{{osmo_run_version}}`` are replaced;
``.tmpl`` is dropped from its name, ``package/`` becomes the package's directory and
``gitignore`` becomes ``.gitignore`` (a dotfile would be easy to lose from a wheel).
"""

from __future__ import annotations

import keyword
import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from osmo_run import __version__
from osmo_run.errors import ScaffoldError

TEMPLATE = Path(__file__).parent / "template"
_DISTRIBUTION_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
# names a project's package must not take: they would shadow what its code imports
_TAKEN = frozenset({"osmo_run", "tests", "test", "data", "runs", *sys.stdlib_module_names})


@dataclass(frozen=True)
class Project:
    """A project :func:`create_project` wrote: its directory, distribution name, package
    name and files (relative to the directory, in the order written)."""

    directory: Path
    name: str
    package: str
    files: tuple[Path, ...]


def package_name(directory: Path) -> str:
    """The Python package a project in ``directory`` gets: its name in NFKC form (as Python
    reads identifiers) lowercased, each run of characters an identifier cannot hold made
    one ``_``; letters of any script stay (``ünïcode`` is its own package).

    Raises :class:`ScaffoldError` when that is no identifier (starts with a digit, is empty)
    or would shadow a module the project imports (``osmo_run``, the standard library's).
    """
    raw = directory.resolve().name
    name = unicodedata.normalize("NFKC", raw).lower()
    kept = "".join(c if ("a" + c).isidentifier() else "_" for c in name)
    package = re.sub(r"_{2,}", "_", kept).strip("_")
    if not package.isidentifier() or keyword.iskeyword(package):
        raise ScaffoldError(
            f"{directory}: {raw!r} makes no Python package name; "
            "choose a name that starts with a letter (e.g. my-agent)"
        )
    if package in _TAKEN:
        raise ScaffoldError(
            f"{directory}: a package named {package!r} would shadow the module of that name; "
            "choose another name"
        )
    return package


def create_project(directory: Path) -> Project:
    """Write a new project into ``directory`` (created with its parents; it may exist if
    empty) and return what was written.

    Raises :class:`ScaffoldError`, before writing anything, when ``directory`` is a file or
    a non-empty directory, or its name makes no package name (:func:`package_name`).
    """
    _check_name_length(directory)
    try:
        if directory.exists() and not directory.is_dir():
            raise ScaffoldError(f"{directory}: exists and is a file; choose a new directory name")
        if directory.is_dir() and any(directory.iterdir()):
            raise ScaffoldError(
                f"{directory}: exists and is not empty; choose a new name or empty it first"
            )
    except OSError as exc:
        raise ScaffoldError(
            f"{directory}: cannot be used ({exc.strerror or exc}); choose another directory"
        ) from None
    package = package_name(directory)
    raw = directory.resolve().name
    name = raw if _DISTRIBUTION_NAME.fullmatch(raw) else _distribution_name(package)
    values = {"package": package, "name": name, "osmo_run_version": __version__}
    written: list[Path] = []
    for source in sorted(p for p in TEMPLATE.rglob("*") if p.is_file()):
        if "__pycache__" in source.parts:
            continue
        relative = _target_path(source.relative_to(TEMPLATE), package)
        text = source.read_text(encoding="utf-8")
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", value)
        target = directory / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ScaffoldError(
                f"{directory}: cannot write {relative} ({exc.strerror or exc}); choose a "
                "directory you can write to"
            ) from None
        written.append(relative)
    return Project(directory, name, package, tuple(written))


_NAME_MAX_BYTES = 255
"""The longest file name (in UTF-8 bytes) Linux, macOS and Windows file systems take."""


def _check_name_length(directory: Path) -> None:
    """Raise :class:`ScaffoldError` when a part of ``directory`` is a longer name than a
    file system takes (the package directory is as long as the project's)."""
    for part in directory.parts:
        size = len(part.encode("utf-8", "surrogateescape"))
        if size > _NAME_MAX_BYTES:
            raise ScaffoldError(
                f"{directory}: a name of {size} bytes is longer than file systems take "
                f"({_NAME_MAX_BYTES}); choose a shorter name"
            )


def _distribution_name(package: str) -> str:
    """A distribution name (ASCII, PEP 508) for ``package``: its letters without their
    accents, runs of anything else made ``-``; ``project`` when nothing is left."""
    ascii_name = unicodedata.normalize("NFKD", package).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-") or "project"


def _target_path(relative: Path, package: str) -> Path:
    parts = [package if part == "package" else part for part in relative.parts]
    parts[-1] = parts[-1].removesuffix(".tmpl")
    if parts[-1] == "gitignore":
        parts[-1] = ".gitignore"
    return Path(*parts)
