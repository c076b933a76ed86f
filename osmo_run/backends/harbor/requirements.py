"""Which packages a workflow needs inside its Harbor trial.

Collected on the host, before any trial starts, from (in this order):

- the code directory's ``pyproject.toml``: ``[project].dependencies`` and the
  ``[project.optional-dependencies]`` groups the spec's ``requirements.extras`` names; or,
  when it declares no ``[project]`` dependencies, its ``requirements.txt``;
- the spec's ``requirements:`` field (``add`` on top, ``only`` instead of the code dir's,
  ``none``: install nothing, the image has everything);
- what osmo-run's own integrations need (its ``openai-agents`` and ``strands`` extras)
  when the workflow or grader module imports ``osmo_run.integrations.<name>``.

``osmo-run`` itself is never installed (the trial gets the SDK staged by the runtime);
``osmo-run[strands]`` in a project's dependencies stands for that extra's requirements.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from osmo_run.errors import RequirementsError

OSMO_RUN = "osmo-run"
INTEGRATION_EXTRAS = {"openai_agents": "openai-agents", "strands": "strands"}
"""``osmo_run.integrations.<module>`` -> the osmo-run extra holding what it imports."""


@dataclass(frozen=True)
class RequirementOptions:
    """The spec's ``requirements:`` field as the backend takes it.

    ``install`` off (``requirements: none``): nothing is installed. ``only``: these instead
    of what the code directory declares. ``add``: these on top. ``extras``: optional
    dependency groups of the code directory's ``pyproject.toml``. ``python_version`` and
    ``platforms`` replace what the trial image says (needed for remote environments whose
    image this machine cannot run).
    """

    install: bool = True
    extras: tuple[str, ...] = ()
    add: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    python_version: str | None = None
    platforms: tuple[str, ...] = ()

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> RequirementOptions:
        """From the spec's ``requirements`` section (``RequirementsSpec.model_dump()``)."""
        only = fields.get("only")
        return cls(
            install=bool(fields.get("install", True)),
            extras=tuple(fields.get("extras") or ()),
            add=tuple(fields.get("add") or ()),
            only=None if only is None else tuple(only),
            python_version=fields.get("python_version"),
            platforms=tuple(fields.get("platforms") or ()),
        )


@dataclass(frozen=True)
class RequirementSet:
    """The requirements to install: normalized, de-duplicated, in the order found."""

    requirements: tuple[str, ...] = ()

    def digest(self) -> str:
        """A hash of the set (order-independent), for caches and image tags."""
        return hashlib.sha256("\n".join(sorted(self.requirements)).encode()).hexdigest()

    def for_interpreter(self, environment: dict[str, str]) -> RequirementSet:
        """The requirements whose environment markers hold for the trial's interpreter
        (``environment``: PEP 508 marker variables), their markers dropped.

        pip evaluates markers for the Python it runs on, even when it downloads for
        another (``--python-version``); so they are decided here, for the trial's.
        Raises :class:`RequirementsError` for a marker that compares what cannot be
        compared (``python_version ~= 'abc'``).
        """
        kept: list[str] = []
        for text in self.requirements:
            requirement = Requirement(text)
            if requirement.marker is not None:
                try:
                    holds = requirement.marker.evaluate(environment)
                except (UndefinedComparison, UndefinedEnvironmentName) as exc:
                    raise RequirementsError(
                        f"requirements: {text!r}: its marker cannot be decided for the "
                        f"trial's Python ({exc}); write it as PEP 508 compares versions"
                    ) from None
                if not holds:
                    continue
                requirement.marker = None
            if str(requirement) not in kept:
                kept.append(str(requirement))
        return RequirementSet(tuple(kept))


def _parse(text: str, where: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        said = str(exc).splitlines()[0]  # the lines after it draw a caret under the text
        raise RequirementsError(
            f"{where}: {text!r} is not a requirement ({said}); write it as pip would take it "
            "(for example 'pyyaml>=6')"
        ) from None


def _read_pyproject(code_dir: Path) -> dict[str, object] | None:
    path = code_dir / "pyproject.toml"
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RequirementsError(f"{path}: cannot read it: {exc}") from None
    project = data.get("project")
    return project if isinstance(project, dict) else None


def _string_list(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequirementsError(f"{where}: must be a list of requirement strings")
    return list(value)


def _from_pyproject(
    code_dir: Path, project: dict[str, object], extras: tuple[str, ...]
) -> list[tuple[str, str]]:
    path = code_dir / "pyproject.toml"
    found = [
        (text, f"{path}: [project].dependencies")
        for text in _string_list(project.get("dependencies", []), f"{path}: [project].dependencies")
    ]
    groups = project.get("optional-dependencies") or {}
    if not isinstance(groups, dict):
        raise RequirementsError(f"{path}: [project.optional-dependencies] must be a table")
    for extra in extras:
        if extra not in groups:
            known = ", ".join(sorted(groups)) or "none"
            raise RequirementsError(
                f"requirements.extras: {extra!r} is not an optional-dependencies group of "
                f"{path} (it has: {known})"
            )
        where = f"{path}: [project.optional-dependencies].{extra}"
        found += [(text, where) for text in _string_list(groups[extra], where)]
    return found


_COMMENT = re.compile(r"(^|\s+)#.*$")
"""pip's rule for a comment: ``#`` at the start of a line or after whitespace."""


def _logical_lines(lines: list[str]) -> list[tuple[int, str]]:
    """``lines`` as pip reads them: a line ending in ``\\`` joined with the next (unless it
    is a comment), comments removed; each with the number of its first physical line."""
    joined: list[tuple[int, str]] = []
    pending: list[str] = []
    first = 0
    for number, line in enumerate(lines, 1):
        if line.endswith("\\") and not _COMMENT.match(line):
            first = first if pending else number
            pending.append(line[:-1])
            continue
        if pending:
            joined.append(
                (first, "".join(pending) + (" " + line if _COMMENT.match(line) else line))
            )
            pending = []
        else:
            joined.append((number, line))
    if pending:  # the file ends with a continuation
        joined.append((first, "".join(pending)))
    return [(number, _COMMENT.sub("", line).strip()) for number, line in joined]


def _nested_file(line: str) -> str | None:
    """The file a ``-r`` line names, in every form pip takes (``-r f``, ``-rf``, ``-r=f``,
    ``--requirement f``, ``--requirement=f``); ``None`` for any other line."""
    if line.startswith("--requirement"):
        rest = line.removeprefix("--requirement")
        if rest[:1] not in ("=", " ", "\t"):
            return None
    elif line.startswith("-r"):
        rest = line.removeprefix("-r")
    else:
        return None
    return rest.strip().removeprefix("=").strip() or None


def _without_hashes(line: str) -> str:
    """``line`` without its ``--hash=…`` / ``--hash …`` options (pip-compile writes them)."""
    parts = line.split()
    kept: list[str] = []
    skip_next = False
    for part in parts:
        if skip_next:
            skip_next = False
        elif part == "--hash":
            skip_next = True
        elif not part.startswith("--hash="):
            kept.append(part)
    return " ".join(kept)


def _from_requirements_txt(
    path: Path, seen: frozenset[Path] = frozenset()
) -> list[tuple[str, str]]:
    """Requirement lines of a requirements file, read as pip reads them (continuation
    lines joined, comments dropped, ``-r`` followed, ``--hash`` dropped).

    Raises :class:`RequirementsError` naming the file and line of any other pip option.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RequirementsError(f"{path}: cannot read it: {exc}") from None
    found: list[tuple[str, str]] = []
    for number, text in _logical_lines(lines):
        where = f"{path}:{number}"
        nested_name = _nested_file(text)
        if nested_name is not None:
            nested = (path.parent / nested_name).resolve()
            if nested not in seen:
                found += _from_requirements_txt(nested, seen | {path.resolve()})
            continue
        line = _without_hashes(text)
        if not line:
            continue
        option = next((part for part in line.split() if part.startswith("-")), None)
        if option is not None:
            raise RequirementsError(
                f"{where}: {option.split('=')[0]} is a pip option osmo-run does not pass on; "
                "list requirements only (the trial installs wheels from this machine's index)"
            )
        found.append((line, where))
    return found


def _osmo_run_extra(extra: str, where: str) -> list[tuple[str, str]]:
    """The requirements of osmo-run's extra ``extra``, from its installed metadata."""
    try:
        declared = importlib.metadata.requires(OSMO_RUN) or []
    except importlib.metadata.PackageNotFoundError:
        raise RequirementsError(
            f"{where}: osmo-run's own metadata is missing (install it with pip) so the "
            f"requirements of its {extra!r} extra are unknown"
        ) from None
    found = []
    for text in declared:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is not None and marker.evaluate({"extra": extra}):
            requirement.marker = None
            found.append((str(requirement), f"osmo-run[{extra}] ({where})"))
    return found


def _imported_modules(source: Path) -> list[str]:
    """Every module name ``source`` imports, read from its syntax tree (unreadable: none)."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return []  # importing it reports the problem
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def integrations_used(code_dir: Path, import_paths: list[str]) -> list[str]:
    """The ``osmo_run.integrations`` modules imported by the modules ``import_paths`` name
    (``module:Class``), read from their source under ``code_dir`` (nothing is imported)."""
    used: list[str] = []
    for import_path in import_paths:
        base = code_dir.joinpath(*import_path.partition(":")[0].split("."))
        for source in (base.with_suffix(".py"), base / "__init__.py"):
            if not source.is_file():
                continue
            for name in _imported_modules(source):
                parts = name.split(".")
                module = parts[2] if parts[:2] == ["osmo_run", "integrations"] else None
                if module in INTEGRATION_EXTRAS and module not in used:
                    used.append(module)
    return used


def _declared(code_dir: Path, options: RequirementOptions) -> list[tuple[str, str]]:
    if options.only is not None:
        if options.extras:
            raise RequirementsError(
                "requirements: extras name groups of the code dir's pyproject.toml, which a "
                "list of requirements replaces; add them to the list instead"
            )
        return [(text, f"requirements[{i}]") for i, text in enumerate(options.only)]
    project = _read_pyproject(code_dir)
    if project is not None and canonicalize_name(str(project.get("name", ""))) == OSMO_RUN:
        # osmo-run's own tree (its examples): the trial's runtime is its SDK, and its
        # host-side dependencies are not the workflow's
        found = [(f"{OSMO_RUN}[{extra}]", "requirements.extras") for extra in options.extras]
    elif project is not None and ("dependencies" in project or options.extras):
        found = _from_pyproject(code_dir, project, options.extras)
    elif options.extras:
        raise RequirementsError(
            f"requirements.extras: {code_dir} has no pyproject.toml with a [project] table "
            "whose optional-dependencies they could name"
        )
    elif (code_dir / "requirements.txt").is_file():
        found = _from_requirements_txt(code_dir / "requirements.txt")
    else:
        found = []
    return found + [(text, f"requirements.add[{i}]") for i, text in enumerate(options.add)]


def collect_requirements(
    code_dir: Path, options: RequirementOptions, import_paths: list[str]
) -> RequirementSet:
    """The requirements the workflow and grader (``import_paths``) need in the trial.

    Raises :class:`RequirementsError` naming the file (and line or field) of a requirement
    that cannot be read, or an unknown extra.
    """
    if not options.install:
        return RequirementSet()
    found = _declared(code_dir, options)
    for module in integrations_used(code_dir, import_paths):
        found += _osmo_run_extra(INTEGRATION_EXTRAS[module], f"osmo_run.integrations.{module}")
    requirements: list[str] = []
    for text, where in found:
        requirement = _parse(text, where)
        if canonicalize_name(requirement.name) == OSMO_RUN:
            expanded = [
                r for extra in sorted(requirement.extras) for r in _osmo_run_extra(extra, where)
            ]
            found += [item for item in expanded if item not in found]  # the loop reaches them
            continue
        normalized = str(requirement)
        if normalized not in requirements:
            requirements.append(normalized)
    return RequirementSet(tuple(requirements))
