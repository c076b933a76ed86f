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
    ("sdk/",),  # what workflow authors import; stdlib only, copied into sandboxes
    ("__init__.py",),  # the package root: the SDK's names re-exported
    ("graders/", "integrations/", "llm/"),
    ("run/reading/", "run/writing/", "run/controls/"),  # rows in; files out; retry, stop
    ("backends/", "run/configuring/"),  # where a rollout runs; what the user asked for
    ("run/reporting/",),  # numbers and verdicts from results
    ("run/executing/",),  # one run start to end, a regrade, a validation
    ("view/", "serve/", "client.py", "scaffold/", "testing.py"),  # what users run beside a run
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


def entry_imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """For every entry of LAYERS, the other entries its files import."""
    found: dict[str, set[str]] = {entry: set() for layer in LAYERS for entry in layer}
    for path in package.rglob("*.py"):
        own = place_of(path.relative_to(package).as_posix())
        for _, module in imported_modules(path, package) if own else ():
            target = module_file(module, package)
            theirs = place_of(target) if target else None
            if own and theirs and theirs[1] != own[1]:
                found[own[1]].add(theirs[1])
    return found


_EVERYONE_USES = ("errors.py", "sdk/", "__init__.py")


def render_layers(package: Path = PACKAGE) -> str:
    """docs/layers.md: the layers, top first, each entry with the entries it imports, as a
    Mermaid graph (GitHub draws it) and as a table."""
    imports = entry_imports(package)

    def lines_of(entry: str) -> int:
        files = (
            [package / entry] if not entry.endswith("/") else package.joinpath(entry).rglob("*.py")
        )
        return sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files)

    def node(entry: str) -> str:
        return "n_" + entry.strip("/").replace("/", "_").replace(".", "_")

    out = [
        "# The layers of osmo_run/, drawn from the code",
        "",
        "Generated by `python -m tests.test_layers > docs/layers.md` from the imports of every",
        "file (tests/test_layers.py holds the order and fails on an import that points up).",
        "Top first; an entry imports only from the layers below it, never from one beside it.",
        "Arrows into errors.py, sdk/ and the package root are left out of the graph (most",
        "entries use them); the table lists every import.",
        "",
        "```mermaid",
        "flowchart TB",
    ]
    for number in reversed(range(len(LAYERS))):
        out.append(f'  subgraph L{number}["layer {number}"]')
        out.append("    direction LR")
        for entry in LAYERS[number]:
            out.append(f'    {node(entry)}["{entry}"]')
        out.append("  end")
    for number in reversed(range(len(LAYERS))):
        for entry in LAYERS[number]:
            for target in sorted(imports[entry] - set(_EVERYONE_USES)):
                out.append(f"  {node(entry)} --> {node(target)}")
    out += ["```", "", "| layer | entry | imports |", "|---|---|---|"]
    for number in reversed(range(len(LAYERS))):
        for entry in LAYERS[number]:
            used = ", ".join(f"`{t}`" for t in sorted(imports[entry])) or "-"
            out.append(f"| {number} | `{entry}` | {used} |")
    return "\n".join(out) + "\n"


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
        "osmo_run/sdk/types.py:2 (sdk/, layer 1) imports osmo_run.cli.app (cli/, layer 9)"
    ]


def test_the_picture_in_docs_is_current() -> None:
    written = (PACKAGE.parent / "docs" / "layers.md").read_text(encoding="utf-8")
    assert written == render_layers(), (
        "docs/layers.md differs from the code: python -m tests.test_layers > docs/layers.md"
    )


@pytest.mark.parametrize("entry", [entry for layer in LAYERS for entry in layer])
def test_every_layer_entry_exists(entry: str) -> None:
    assert (PACKAGE / entry).exists(), f"LAYERS names osmo_run/{entry}, which is gone"


if __name__ == "__main__":
    print(render_layers(), end="")
