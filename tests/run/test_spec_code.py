"""The spec's ``code: {include: [...]}`` (what of the code dir Harbor trials get beyond
the default): patterns stay inside the code dir, and a list too long to match against
every file is refused, each with one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from osmo_run.errors import SpecError
from osmo_run.run.configuring.spec_file import load_spec


def _load(tmp_path: Path, include: object) -> str | list[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps({"workflow": "m:C", "code": {"include": include}}))
    try:
        return load_spec(path).code.include
    except SpecError as exc:
        return str(exc)


@pytest.mark.parametrize("include", [[".env"], ["certs/*.pem", ".config/app.toml"], ["**"], []])
def test_relative_patterns_are_taken(tmp_path: Path, include: list[str]) -> None:
    assert _load(tmp_path, include) == include


@pytest.mark.parametrize(
    ("include", "said"),
    [
        (["/etc/passwd"], "must be a pattern relative to the code dir"),
        (["../secrets/*"], "must be a pattern relative to the code dir"),
        (["a/../../b"], "must be a pattern relative to the code dir"),
        ([""], "code.include.0"),
        (["a"] * 1001, "at most 1000 items"),
        (["x" * 5000], "at most 4096 characters"),
        ("*.pem", "code.include"),
    ],
)
def test_patterns_leaving_the_code_dir_or_too_many_are_refused(
    tmp_path: Path, include: object, said: str
) -> None:
    message = _load(tmp_path, include)
    assert isinstance(message, str) and said in message, message
    assert "field 'code.include" in message, message
