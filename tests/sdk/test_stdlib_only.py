"""``osmo_run/sdk``, ``graders`` and ``integrations`` are copied into trials and sandboxes
(``stage_runtime``) where nothing but the standard library may be installed: every module
of them imports there, on Python 3.11, with only the staged copy on the path.

The interpreter runs with ``-I -S``: no site-packages, no ``PYTHONPATH``, no user site, not
the repository. Optional libraries (math-verify, jsonschema, the agent frameworks) are
imported lazily, so importing is stdlib-only; an integration whose framework is missing
fails with the one line naming its extra, never with a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO, require_extra
from tests.sdk.test_public_api import _python311

RUNTIME_PACKAGES = ("sdk", "graders", "integrations")
"""What ``osmo_run.backends.harbor.runtime.stage_runtime`` copies besides ``__init__.py`` and
``errors.py`` (its ``RUNTIME_PACKAGES``; copied here as it does, so that this test needs no
harbor extra)."""

FRAMEWORK_MODULES = {
    "osmo_run.integrations.openai_agents": "openai-agents",
    "osmo_run.integrations.strands": "strands",
}
"""Integrations that need their framework when imported: ``osmo_run.integrations.X`` -> the
extra a missing one names."""

SCRIPT = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys
    sys.path.insert(0, sys.argv[1])
    stdlib = set(sys.stdlib_module_names)
    imported, refused = [], {}
    for package in sys.argv[2].split(","):
        root = importlib.import_module("osmo_run." + package)
        names = [root.__name__] + [
            info.name for info in pkgutil.walk_packages(root.__path__, root.__name__ + ".")
        ]
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                refused[name] = str(exc)
            else:
                imported.append(name)
    foreign = sorted(
        {m.split(".")[0] for m in sys.modules} - stdlib - {"osmo_run", "__main__", "__mp_main__"}
    )
    print(json.dumps({
        "version": list(sys.version_info[:2]),
        "imported": imported,
        "refused": refused,
        "foreign": foreign,
        "files": sorted({m.__file__ for m in list(sys.modules.values())
                         if getattr(m, "__name__", "").startswith("osmo_run")
                         and getattr(m, "__file__", None)}),
    }))
    """
)


def test_every_runtime_module_imports_with_the_stdlib_only(tmp_path: Path) -> None:
    staged = tmp_path / "staged"
    (staged / "osmo_run").mkdir(parents=True)
    for name in ("__init__.py", "errors.py"):
        shutil.copy2(REPO / "osmo_run" / name, staged / "osmo_run" / name)
    for name in RUNTIME_PACKAGES:
        shutil.copytree(
            REPO / "osmo_run" / name,
            staged / "osmo_run" / name,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    python = _python311() or sys.executable
    proc = subprocess.run(
        [python, "-I", "-S", "-c", SCRIPT, str(staged), ",".join(RUNTIME_PACKAGES)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # -I leaves the working directory off the path; be sure of it
        env={},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    # every module came from the staged copy, and nothing but the stdlib was loaded
    assert all(path.startswith(str(staged)) for path in found["files"]), found["files"]
    assert found["foreign"] == []
    # the agent integrations need their framework: each says which extra, nothing else does
    assert set(found["refused"]) == set(FRAMEWORK_MODULES), found["refused"]
    for module, extra in FRAMEWORK_MODULES.items():
        assert f"needs the '{extra}' extra" in found["refused"][module]
    packages = {name.split(".")[1] for name in found["imported"]}
    assert packages == set(RUNTIME_PACKAGES)
    modules = {
        f"osmo_run.{package}.{path.stem}"
        for package in RUNTIME_PACKAGES
        for path in (staged / "osmo_run" / package).glob("*.py")
        if path.stem != "__init__"
    }
    packages_themselves = {f"osmo_run.{package}" for package in RUNTIME_PACKAGES}
    assert set(found["imported"]) == (modules - set(FRAMEWORK_MODULES)) | packages_themselves
    assert found["version"] == [3, 11] or _python311() is None


def test_the_copy_here_is_what_trials_get() -> None:
    require_extra("harbor", "harbor")
    from osmo_run.backends.harbor.runtime import RUNTIME_PACKAGES as staged_by_trials

    assert staged_by_trials == RUNTIME_PACKAGES
