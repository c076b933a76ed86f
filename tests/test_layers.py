"""Imports point down: every import in osmo_run/ names a module of its own layer or of a
layer below it, and the folders that share a layer do not import each other.

The layers are written here once, lowest first; the README's Layout section and
docs/layers.md draw the same order. Every import counts, at the top of a module, inside a
function, or under ``TYPE_CHECKING``: each one is a dependency a reader must know about.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "osmo_run"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors.py",),
    ("sdk/",),  # what workflow authors import; stdlib only
    ("__init__.py",),  # the package root: the SDK's names re-exported
    ("graders/", "integrations/", "llm/"),
    ("run/reading/",),  # rows in
    ("run/writing/",),  # the run directory's files
    ("run/controls/",),  # retries, the breaker, Ctrl-C
    ("backends/",),  # where a rollout runs
    ("run/configuring/",),  # the spec
    ("run/reporting/",),  # numbers and verdicts from results
    ("run/executing/",),  # one run start to end, a regrade, a validation
    ("view/", "scaffold/", "testing.py"),
    ("cli/",),
    ("__main__.py",),
)
"""Lowest first. An entry ending in ``/`` is a folder (with everything below it), any other
a file; each file of osmo_run/ belongs to exactly one entry."""


def place_of(relative: str) -> tuple[int, str] | None:
    """The layer number and entry a file of osmo_run/ (a path relative to it) belongs to."""
    for number, layer in enumerate(LAYERS):
        for entry in layer:
            if relative == entry or (entry.endswith("/") and relative.startswith(entry)):
                return number, entry
    return None


def module_file(module: str, package: Path) -> str | None:
    """The file of ``package`` (osmo_run/; relative to it) that defines ``module``, or None
    when the module is not osmo-run's."""
    parts = module.split(".")
    if parts[0] != "osmo_run":
        return None
    for end in range(len(parts), 0, -1):  # osmo_run.a.b.name: the longest prefix that exists
        base = package.joinpath(*parts[1:end])
        if base.with_suffix(".py").is_file() and end > 1:
            return base.with_suffix(".py").relative_to(package).as_posix()
        if (base / "__init__.py").is_file():
            return (base / "__init__.py").relative_to(package).as_posix()
    return None


def imported_modules(path: Path, package_root: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in ``path`` (a file of ``package_root``), relative
    ones made absolute, each ``from x import y`` as ``x.y`` (a module or a name in x)."""
    relative = path.relative_to(package_root.parent).with_suffix("")
    package = list(relative.parts if path.name == "__init__.py" else relative.parts[:-1])
    if path.name == "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def layering_problems(package: Path = PACKAGE) -> list[str]:
    """Every file no layer holds, and every import that points up or sideways, one line
    each: ``file:line imports module (layer N, entry) from layer M``."""
    problems = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        own = place_of(relative)
        if own is None:
            problems.append(f"osmo_run/{relative} is in no layer: add it to LAYERS")
            continue
        for line, module in imported_modules(path, package):
            target = module_file(module, package)
            if target is None or target == relative:
                continue
            theirs = place_of(target)
            if theirs is None:
                continue  # reported for its own file
            if theirs[0] > own[0] or (theirs[0] == own[0] and theirs[1] != own[1]):
                problems.append(
                    f"osmo_run/{relative}:{line} ({own[1]}, layer {own[0]}) imports "
                    f"{module} ({theirs[1]}, layer {theirs[0]})"
                )
    return problems


def test_imports_point_down() -> None:
    problems = layering_problems()
    assert not problems, "imports that do not point down:\n" + "\n".join(problems)


def test_an_import_up_is_named_with_its_place(tmp_path: Path) -> None:
    """The check itself: a lower layer importing a higher one is caught, with where."""
    fake = tmp_path / "osmo_run"
    (fake / "sdk").mkdir(parents=True)
    (fake / "cli").mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "cli" / "__init__.py").write_text("from osmo_run.sdk import types\n")
    (fake / "sdk" / "types.py").write_text("def f():\n    from osmo_run.cli import app\n")
    assert layering_problems(fake) == [
        "osmo_run/sdk/types.py:2 (sdk/, layer 1) imports osmo_run.cli.app (cli/, layer 12)"
    ]


@pytest.mark.parametrize("entry", [entry for layer in LAYERS for entry in layer])
def test_every_layer_entry_exists(entry: str) -> None:
    assert (PACKAGE / entry).exists(), f"LAYERS names osmo_run/{entry}, which is gone"
