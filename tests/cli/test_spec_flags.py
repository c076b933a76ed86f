"""The README's table of which spec fields have flags is true: it lists every spec field, each
flag it names exists on the commands it names and sets that field when given, and a field it
says has none has no flag of its name."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from osmo_run.cli import app
from osmo_run.run.configuring.spec import RunSpec
from osmo_run.run.executing.settings import RunSettings
from tests.conftest import CLI, REPO

ROW = re.compile(r"^\| `(?P<field>[\w.]+)` \| (?P<flags>.+?) \| (?P<commands>[\w, ]*?) ?\|$")
NESTED = ("timeouts", "harbor", "dataset", "budget")
"""Sections whose fields have flags: the table lists their fields one by one."""

# for each field the table gives a flag: the arguments that set it, and the value they set
GIVEN: dict[str, tuple[list[str], Any]] = {
    "workflow": (["--workflow", "tests.workflows:NoopWorkflow"], "tests.workflows:NoopWorkflow"),
    "grader": (["--grader", "tests.workflows:ScriptedGrader"], "tests.workflows:ScriptedGrader"),
    "code_dir": (["--code-dir", str(REPO)], REPO),
    "concurrency": (["--concurrency", "7"], 7),
    "timeouts.agent_sec": (["--agent-timeout", "5"], 5.0),
    "timeouts.grader_sec": (["--grader-timeout", "6"], 6.0),
    "output": (["--output", "elsewhere/x.jsonl"], Path("elsewhere/x.jsonl")),
    "bad_rows": (["--bad-rows", "record"], "record"),
    "limit": (["--limit", "3"], 3),
    "shard": (["--shard", "2/3"], "2/3"),
    "samples_per_row": (["--samples", "2"], 2),
    "rows": (["--rows", "1,3-4"], "1,3-4"),
    "shuffle": (["--shuffle", "--limit", "2"], True),
    "seed": (["--seed", "5"], 5),
    "dataset.format": (["--dataset-format", "csv"], "csv"),
    "isolation": (["--isolation", "process"], "process"),
    "breaker": (["--breaker", "3"], 3),
    "budget.tokens": (["--budget-tokens", "900"], 900),
    "budget.usd": (["--budget-usd", "2.5"], 2.5),
    "harbor.task_dir": (["--task-dir", "task"], Path("task")),
    "harbor.tasks_root": (["--tasks-root", "tasks"], Path("tasks")),
    "harbor.env": (["--env", "daytona"], "daytona"),
    "harbor.environment_import_path": (["--environment-import-path", "a.b:Env"], "a.b:Env"),
    "harbor.environment_kwargs": (["--env-kwarg", "cpus=2"], {"cpus": 2}),
    "harbor.prebuild": (["--no-prebuild"], False),
    "harbor.keep_trials": (["--keep-trials"], True),
    "harbor.trials_dir": (["--trials-dir", "trials"], Path("trials")),
    "harbor.preflight_timeout_sec": (["--preflight-timeout", "5"], 5.0),
}


def _table() -> dict[str, tuple[list[str], list[str]]]:
    """The README's rows: field -> (flags, commands)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    body = text.split("<!-- spec-flags: begin -->\n", 1)[1].split("<!-- spec-flags: end -->")[0]
    rows = {}
    for line in body.splitlines()[2:]:
        match = ROW.match(line)
        assert match, f"README spec-flags row not understood: {line!r}"
        flags = [] if match["flags"].startswith("none") else re.findall(r"--[\w-]+", match["flags"])
        commands = [c.strip() for c in match["commands"].split(",") if c.strip()]
        rows[match["field"]] = (flags, commands)
    return rows


def _options(command: str) -> set[str]:
    group: Any = typer.main.get_command(app)  # typer's own group class (typer vendors click)
    return {
        opt
        for param in group.commands[command].params
        for opt in (*param.opts, *param.secondary_opts)
    }


def _field(spec: RunSpec, path: str) -> Any:
    value: Any = spec
    for part in path.split("."):
        value = getattr(value, part)
    return value


def test_the_table_lists_every_spec_field_once() -> None:
    expected = {name for name in RunSpec.model_fields if name not in NESTED}
    for section in NESTED:
        model = RunSpec.model_fields[section].annotation
        assert isinstance(model, type) and issubclass(model, RunSpec.__base__)
        expected |= {f"{section}.{name}" for name in model.model_fields}
    assert set(_table()) == expected


def test_a_field_without_a_flag_has_no_flag_of_its_name() -> None:
    options = _options("local") | _options("harbor") | _options("serve")
    for field, (flags, _) in _table().items():
        if not flags:
            assert "--" + field.rsplit(".", 1)[-1].replace("_", "-") not in options, field


@pytest.mark.parametrize(
    ("field", "command"),
    [(f, c) for f, (flags, commands) in _table().items() if flags for c in commands],
)
def test_each_flag_exists_and_sets_its_field(
    field: str, command: str, cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flags, _ = _table()[field]
    assert set(flags) <= _options(command)
    if command == "harbor" or (command == "serve" and field.startswith("harbor.")):
        pytest.importorskip("harbor")
    args, expected = GIVEN[field]
    assert args[0] in flags
    seen: list[RunSpec] = []
    if command == "serve":
        _stop_serve_before_listening(monkeypatch, seen)
        base = ["--workflow", "tests.workflows:NoopWorkflow", "--code-dir", str(REPO)]
        base += ["--port", "0", "--display", "none"]
        if field.startswith("harbor."):
            base += ["--task-dir", "task"]
        proc = cli(command, *base, *args)
        assert proc.returncode == 0, proc.stderr
        (spec,) = seen
        assert _field(spec, field) == expected
        return

    def launched(settings: RunSettings, make_backend: object) -> None:
        seen.append(settings.spec)
        raise typer.Exit(0)

    # the module, not the package's attribute of that name (the command function)
    monkeypatch.setattr(sys.modules[f"osmo_run.cli.{command}"], "launch", launched)
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    base = ["--workflow", "tests.workflows:NoopWorkflow", "--code-dir", str(REPO)]
    if command == "harbor":
        base += ["--task-dir", "task"]
    proc = cli(command, data, *base, *args)
    assert proc.returncode == 0, proc.stderr
    (spec,) = seen
    assert _field(spec, field) == expected


def _stop_serve_before_listening(monkeypatch: pytest.MonkeyPatch, seen: list[RunSpec]) -> None:
    """``osmo-run serve`` notes the spec it loads in ``seen`` and stops, its backend made,
    where it would listen."""
    from osmo_run.cli import launch

    load_run_spec = launch.load_run_spec

    def loaded(*args: Any, **kwargs: Any) -> RunSpec:
        spec = load_run_spec(*args, **kwargs)
        seen.append(spec)
        return spec

    def run_serving(run: object) -> int:
        raise typer.Exit(0)

    monkeypatch.setattr(launch, "load_run_spec", loaded)
    monkeypatch.setattr("osmo_run.serve.session.run_serving", run_serving)
