"""``osmo-run local`` stays away from harbor: it never imports it."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from tests.conftest import CLI, WriteJsonl, cli_env

# Loaded at start-up from PYTHONPATH: writes every module the process holds when it ends.
# The CLI leaves through os._exit (no atexit), and import_module escapes -X importtime.
SITECUSTOMIZE = """
import atexit, os, sys

def _dump():
    with open(os.environ["OSMO_TEST_MODULES_LOG"], "w") as log:
        log.write("\\n".join(sorted(sys.modules)))

_real_exit = os._exit

def _exit(code):
    _dump()
    _real_exit(code)

os._exit = _exit
atexit.register(_dump)
"""


def test_local_run_never_imports_harbor(cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    log = tmp_path / "modules.log"
    # the hook first, and whatever path the tests run with after it (a worktree's own tree
    # ahead of the installed checkout), so the child imports the code under test
    path = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))
    env = cli_env(PYTHONPATH=path, OSMO_TEST_MODULES_LOG=str(log))
    data = write_jsonl([{"prompt": "hi", "label": "hi"}])
    proc = cli.local(
        data,
        "--workflow",
        "tests.workflows:ScriptedWorkflow",
        "--grader",
        "tests.workflows:ScriptedGrader",
        "-o",
        tmp_path / "out.jsonl",
        env=env,
        in_process=False,  # which modules a fresh process loads
    )
    assert proc.returncode == 0, proc.stderr
    modules = set(log.read_text().splitlines())
    assert {
        "osmo_run.backends.local",
        "osmo_run.run.executing.runner",
        "tests.workflows",
    } <= modules
    harbor = sorted(
        name
        for name in modules
        if name == "harbor" or name.startswith(("harbor.", "osmo_run.backends.harbor"))
    )
    assert harbor == []
