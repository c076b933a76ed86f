"""Without an optional extra, asking for its feature is one error naming the extra."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from osmo_run.sdk.imports import DependencyImportError, load_object


@pytest.mark.parametrize(
    ("module", "integration", "extra"),
    [("agents", "openai_agents", "openai-agents"), ("strands", "strands", "strands")],
)
def test_an_integration_without_its_framework_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, integration: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, f"osmo_run.integrations.{integration}", raising=False)
    with pytest.raises(ModuleNotFoundError, match=rf"needs the '{extra}' extra") as caught:
        importlib.import_module(f"osmo_run.integrations.{integration}")
    assert f"pip install 'osmo-run[{extra}]'" in str(caught.value)
    assert caught.value.name == module


def test_a_workflow_importing_a_missing_framework_is_told_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "uses_strands.py").write_text(
        "import strands\n\nclass W:\n    pass\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "strands", None)
    with pytest.raises(DependencyImportError, match=r"pip install 'osmo-run\[strands\]'"):
        load_object("uses_strands:W", "workflow")
