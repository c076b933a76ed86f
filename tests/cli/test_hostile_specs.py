"""Hostile run specs: each is refused in one line, quickly, and nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CLI, error_lines

_HEAD = "workflow: tests.workflows:EchoWorkflow\n"


def _alias_bomb(levels: int) -> str:
    """Nine-fold YAML aliases, ``levels`` deep: a few hundred bytes that expand to 9**levels
    strings (the 'billion laughs')."""
    lines = [
        "workflow_config:",
        "  settings:",
        '    l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    for level in range(1, levels):
        refs = ",".join([f"*l{level - 1}"] * 9)
        lines.append(f"    l{level}: &l{level} [{refs}]")
    return _HEAD + "\n".join(lines) + "\n"


@pytest.mark.parametrize("command", ["local", "validate"])
def test_a_yaml_alias_bomb_is_refused_at_once(
    cli: CLI, tmp_path: Path, write_jsonl, command: str
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(_alias_bomb(9), encoding="utf-8")
    data = write_jsonl([{"id": "a", "prompt": "hi", "label": "x"}])
    args = ("local", data, "--spec", spec) if command == "local" else ("validate", spec, data)
    # Validating the expanded 387 million strings took hours; the refusal takes a moment.
    result = cli.subprocess(*args, timeout=60)
    assert result.returncode == 2, result.stderr
    message = "through YAML aliases (&name / *name)"
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_aliases_of_a_reasonable_size_are_still_read(tmp_path: Path) -> None:
    from osmo_run.run.configuring.spec_file import load_spec

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        _HEAD + "workflow_config:\n  settings:\n    a: &a {t: 0.5}\n    b: *a\n", encoding="utf-8"
    )
    assert load_spec(spec).workflow_config.settings == {"a": {"t": 0.5}, "b": {"t": 0.5}}


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_values_are_refused_in_one_line(
    cli: CLI, tmp_path: Path, write_jsonl, depth: int
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        _HEAD + "workflow_config:\n  settings:\n    x: " + "[" * depth + "]" * depth + "\n",
        encoding="utf-8",
    )
    data = write_jsonl([{"id": "a", "prompt": "hi", "label": "x"}])
    result = cli.local(data, "--spec", spec)
    assert result.returncode == 2
    (line,) = error_lines(result.stderr)
    assert line == f"error: {spec}: values nest more than 64 levels deep; flatten the settings"
