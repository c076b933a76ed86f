"""Which requirements a Harbor trial gets: collected from a code directory, the spec's
``requirements:`` field and the integrations a workflow imports (no Docker, no pip)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("harbor")

from osmo_run.backends.harbor.requirements import (
    RequirementOptions,
    collect_requirements,
)
from osmo_run.backends.harbor.wheelhouse import (
    TargetPython,
    pip_problem,
    platform_tags,
)
from osmo_run.errors import RequirementsError
from osmo_run.run.spec import RunSpec

REPO = Path(__file__).resolve().parents[2]


def _project(root: Path, pyproject: str | None = None, requirements: str | None = None) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "flows.py").write_text("import yaml\n")
    if pyproject is not None:
        (root / "pyproject.toml").write_text(pyproject)
    if requirements is not None:
        (root / "requirements.txt").write_text(requirements)
    return root


PYPROJECT = """
[project]
name = "demo"
version = "0"
dependencies = ["PyYAML>=6", "httpx"]
[project.optional-dependencies]
toml = ["tomli-w>=1"]
"""


def _collect(root: Path, **options: object) -> tuple[str, ...]:
    chosen = RequirementOptions(**options)  # type: ignore[arg-type]
    return collect_requirements(root, chosen, ["pkg.flows:Flow"]).requirements


def test_pyproject_dependencies_and_named_extras(tmp_path: Path) -> None:
    root = _project(tmp_path, PYPROJECT, requirements="ignored-when-pyproject-declares\n")
    assert _collect(root) == ("PyYAML>=6", "httpx")
    assert _collect(root, extras=("toml",)) == ("PyYAML>=6", "httpx", "tomli-w>=1")
    assert _collect(root, add=("rich",)) == ("PyYAML>=6", "httpx", "rich")


def test_unknown_extra_names_the_groups(tmp_path: Path) -> None:
    root = _project(tmp_path, PYPROJECT)
    with pytest.raises(
        RequirementsError, match=r"'gpu' is not an optional-dependencies group .*toml"
    ):
        _collect(root, extras=("gpu",))


def test_requirements_txt_comments_hashes_and_nested_files(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        requirements="# pinned\npyyaml==6.0.2 --hash=sha256:abc  # yaml\n\n-r more.txt\n",
    )
    (root / "more.txt").write_text("httpx>=0.27\n")
    assert _collect(root) == ("pyyaml==6.0.2", "httpx>=0.27")


def test_a_bad_line_names_file_and_line(tmp_path: Path) -> None:
    root = _project(tmp_path, requirements="pyyaml\nnot a requirement!!\n")
    with pytest.raises(RequirementsError, match=r"requirements\.txt:2: 'not a requirement!!'"):
        _collect(root)
    root2 = _project(tmp_path / "b", requirements="--index-url http://example.invalid\n")
    with pytest.raises(
        RequirementsError, match=r"requirements\.txt:1: --index-url is a pip option"
    ):
        _collect(root2)


def test_spec_list_replaces_and_none_installs_nothing(tmp_path: Path) -> None:
    root = _project(tmp_path, PYPROJECT)
    assert _collect(root, only=("attrs",)) == ("attrs",)
    assert _collect(root, install=False) == ()


def test_the_spec_field_forms() -> None:
    none = RunSpec.model_validate({"workflow": "a:B", "requirements": "none"})
    assert none.requirements.install is False
    listed = RunSpec.model_validate({"workflow": "a:B", "requirements": ["attrs"]})
    assert listed.requirements.only == ["attrs"]
    mapping = RunSpec.model_validate(
        {"workflow": "a:B", "requirements": {"extras": ["toml"], "add": ["rich"]}}
    )
    assert (mapping.requirements.extras, mapping.requirements.add) == (["toml"], ["rich"])
    with pytest.raises(ValueError, match="is none, a list of requirements"):
        RunSpec.model_validate({"workflow": "a:B", "requirements": "all"})


def test_integrations_bring_their_extra_and_osmo_run_is_never_installed(tmp_path: Path) -> None:
    root = _project(tmp_path, '[project]\nname="d"\nversion="0"\ndependencies=["osmo-run"]\n')
    (root / "pkg" / "flows.py").write_text(
        "from osmo_run.integrations.strands import rollout_model\n"
    )
    names = _collect(root)
    assert "osmo-run" not in " ".join(names)
    assert any(name.startswith("strands-agents") for name in names)


def test_osmo_runs_own_tree_declares_nothing_for_trials() -> None:
    """The repository's examples run with the repository as code dir: its own dependencies
    (typer, rich, ...) are the host's, not the workflow's."""
    calculator = collect_requirements(
        REPO, RequirementOptions(), ["examples.calculator:CalculatorWorkflow"]
    )
    assert calculator.requirements == ()
    agents = collect_requirements(REPO, RequirementOptions(), ["examples.agents_openai:X"])
    assert any(name.startswith("openai-agents") for name in agents.requirements)


def test_platform_tags_cover_older_manylinux_levels() -> None:
    tags = platform_tags("x86_64", "glibc 2.36")
    assert tags[0] == "manylinux_2_36_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert platform_tags("aarch64", None) == ("musllinux_1_2_aarch64", "musllinux_1_1_aarch64")


def test_pip_output_becomes_one_line_naming_the_requirement() -> None:
    target = TargetPython("3.11", ("manylinux_2_36_x86_64",))
    output = (
        "ERROR: Could not find a version that satisfies the requirement zz-nope>=1 (from "
        "versions: none)\nERROR: No matching distribution found for zz-nope>=1\n"
    )
    line = pip_problem(output, target)
    assert "\n" not in line
    assert line.startswith(
        "requirements: zz-nope>=1 has no wheel for the trial image's Python 3.11"
    )


def test_the_json_schema_takes_every_form() -> None:
    """Editors validating a spec with ``osmo-run schema`` accept what the loader accepts."""
    import json

    jsonschema = pytest.importorskip("jsonschema")
    from osmo_run.run.spec import spec_json_schema

    schema = json.loads(spec_json_schema())
    for form in ("none", ["attrs"], {"extras": ["toml"], "add": ["rich"]}):
        jsonschema.validate({"workflow": "a:B", "requirements": form}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"workflow": "a:B", "requirements": "all"}, schema)


def test_an_init_project_installs_nothing_until_it_declares_something(tmp_path: Path) -> None:
    """``osmo-run init``'s pyproject depends on osmo-run only, which trials never install."""
    from osmo_run.scaffold import create_project

    project = create_project(tmp_path / "myproj")
    root = tmp_path / "myproj"
    workflow = f"{project.package}.rollout:Workflow"
    assert collect_requirements(root, RequirementOptions(), [workflow]).requirements == ()
    added = RequirementOptions(add=("pyyaml>=6",))
    assert collect_requirements(root, added, [workflow]).requirements == ("pyyaml>=6",)


def test_a_remote_environment_needs_the_trials_python_stated() -> None:
    """Daytona's image cannot be asked from here: the spec says what it runs, or the run
    stops before any row with the field to set."""
    import asyncio

    from osmo_run.backends.harbor.wheelhouse import target_python

    with pytest.raises(RequirementsError, match=r"set requirements\.python_version"):
        asyncio.run(target_python(None, RequirementOptions(), "daytona"))
    stated = RequirementOptions.from_fields(
        {"python_version": "3.12", "platforms": ["manylinux_2_39_x86_64"]}
    )
    target = asyncio.run(target_python(None, stated, "daytona"))
    assert (target.version, target.platforms) == ("3.12", ("manylinux_2_39_x86_64",))


def test_no_pip_on_the_host_is_named() -> None:
    target = TargetPython("3.11", ("manylinux_2_36_x86_64",))
    line = pip_problem("/venv/bin/python: No module named pip\n", target)
    assert "has no pip" in line and "python -m ensurepip" in line
