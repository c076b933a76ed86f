"""The conventions a user reaches for first: ``--version``, shell completion, and ``NO_COLOR`` /
``FORCE_COLOR``, each through the real console script."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from osmo_run import __version__
from tests.conftest import CLI, OSMO_RUN, REPO, cli_env, run_on_a_terminal

SGR = re.compile(rb"\x1b\[[0-9;]*m")
"""An ANSI style (colour, bold) sequence."""
CURSOR_HIDDEN = b"\x1b[?25l"
"""What a live display sends first: the redrawn table hides the cursor."""


def test_version_prints_the_version_and_exits_0(cli: CLI) -> None:
    proc = cli.subprocess("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"osmo-run {__version__}\n", "")
    assert "--version" in cli("--help").stdout


def test_show_completion_prints_a_script_that_completes_commands_and_flags(
    cli: CLI, tmp_path: Path
) -> None:
    shown = cli.subprocess("--show-completion", "bash")
    assert shown.returncode == 0, shown.stderr
    assert "_OSMO_RUN_COMPLETE=complete_bash" in shown.stdout
    # what the script asks the console script for when the user presses tab
    for words, cword, expected in [
        ("osmo-run lo", 1, "local"),
        ("osmo-run local --env", 2, "--env-file"),
    ]:
        env = cli_env(_OSMO_RUN_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword))
        proc = cli.subprocess(env=env)
        assert proc.returncode == 0, proc.stderr
        assert expected in proc.stdout.split()


def test_install_completion_adds_the_script_to_the_shells_startup_file(
    cli: CLI, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    proc = cli.subprocess("--install-completion", "bash", env=cli_env(HOME=str(home)))
    assert proc.returncode == 0, proc.stderr
    assert "completion installed" in proc.stdout
    assert "osmo-run" in (home / ".bashrc").read_text()
    (script,) = (home / ".bash_completions").iterdir()
    assert "_OSMO_RUN_COMPLETE=complete_bash" in script.read_text()


def _dataset(tmp_path: Path) -> Path:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": "hi", "label": "hi"}) + "\n" for _ in range(3)))
    return data


def _args(tmp_path: Path) -> list[str]:
    workflow = ("--workflow", "tests.workflows:ScriptedWorkflow")
    grader = ("--grader", "tests.workflows:ScriptedGrader")
    out = ("-o", str(tmp_path / "out.jsonl"), "--overwrite")
    return ["local", str(_dataset(tmp_path)), "--code-dir", str(REPO), *workflow, *grader, *out]


def _through_a_pipe(tmp_path: Path, **env: str) -> bytes:
    proc = subprocess.run(
        [str(OSMO_RUN), *_args(tmp_path)],
        cwd=tmp_path,
        env=cli_env(TERM="xterm-256color", **env),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert b"Run summary" in proc.stdout
    return proc.stdout + proc.stderr


def _on_a_terminal(tmp_path: Path, **env: str) -> bytes:
    code, shown = run_on_a_terminal(
        [str(OSMO_RUN), *_args(tmp_path)], tmp_path, cli_env(TERM="xterm-256color", **env)
    )
    assert code == 0, shown
    assert b"Run summary" in shown
    return shown


def test_a_pipe_gets_no_escape_codes(tmp_path: Path) -> None:
    assert b"\x1b" not in _through_a_pipe(tmp_path)


def test_force_color_colours_a_pipe_without_redrawing_a_live_table(tmp_path: Path) -> None:
    shown = _through_a_pipe(tmp_path, FORCE_COLOR="1")
    assert SGR.search(shown)
    assert CURSOR_HIDDEN not in shown  # the plain display: a log, not frames


def test_a_terminal_gets_colours_and_the_live_table(tmp_path: Path) -> None:
    shown = _on_a_terminal(tmp_path)
    assert SGR.search(shown) and CURSOR_HIDDEN in shown


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"NO_COLOR": "1", "FORCE_COLOR": "1"}])
def test_no_color_drops_every_style_on_a_terminal(tmp_path: Path, env: dict[str, str]) -> None:
    shown = _on_a_terminal(tmp_path, **env)
    assert SGR.findall(shown) == []
    assert CURSOR_HIDDEN in shown  # still the live table: NO_COLOR is about colour only


def test_no_color_wins_over_force_color_in_a_pipe(tmp_path: Path) -> None:
    assert b"\x1b" not in _through_a_pipe(tmp_path, NO_COLOR="1", FORCE_COLOR="1")
