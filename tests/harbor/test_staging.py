"""What of the code dir reaches a Harbor trial (issue 28, items 1, 6, 18), through the
real ``osmo-run harbor`` and real Docker trials.

Each code dir is built in the test's temporary directory with ``staging_workflows.py``,
whose workflow lists the files it finds beside itself in the trial (the prebuilt image's
code layer) and tries the imports a row names. Each run has its own ``TMPDIR``, so a
staging copy left behind shows.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harbor.conftest import (
    CALCULATOR_TASK,
    HERE,
    OSMO_RUN,
    HarborRun,
    cli_env,
    run_harbor,
    stop_process,
    write_inputs,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SECRET = "sk-live-0123456789abcdefSECRET"
WORKFLOW = "staging_workflows:ListingWorkflow"
GRADER = "staging_workflows:AlwaysOne"


def _spec(code_dir: Path, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workflow": WORKFLOW,
        "grader": GRADER,
        "code_dir": str(code_dir),
        "concurrency": 1,
        "timeouts": {"agent_sec": 60, "grader_sec": 30},
        "requirements": "none",
        "harbor": {"task_dir": str(CALCULATOR_TASK)},
    }
    spec.update(overrides)
    return spec


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _code_dir(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    shutil.copy2(HERE / "staging_workflows.py", root / "staging_workflows.py")
    _write(root, files)
    return root


def _env(directory: Path, **extra: str) -> dict[str, str]:
    tmp = directory / "tmpdir"
    tmp.mkdir(exist_ok=True)
    return cli_env(TMPDIR=str(tmp), OSMO_RUN_CACHE_DIR=str(directory / "cache"), **extra)


def _leftover_staging(directory: Path) -> list[str]:
    return sorted(p.name for p in (directory / "tmpdir").iterdir() if p.name.startswith("osmo-run"))


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "protocol.file.allow=always", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
        },
    )


def _everything_said(run: HarborRun) -> str:
    written = [p.read_text(errors="replace") for p in run.out_dir.rglob("*") if p.is_file()]
    return "\n".join([run.stdout, run.stderr, *written])


# -- outside git ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_dir_run(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> HarborRun:
    """A code dir outside any git repository holding secrets, dot-files, a virtual
    environment, a file the spec includes, and a file whose name is not UTF-8."""
    directory = tmp_path_factory.mktemp("staging-plain")
    code = _code_dir(
        directory / "code",
        {
            "pkg/__init__.py": "",
            ".env": f"OPENAI_API_KEY={SECRET}\n",
            ".ssh/id_rsa": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n",
            ".aws/credentials": f"[default]\naws_secret_access_key = {SECRET}\n",
            "deploy/server.pem": SECRET,
            "deploy/id_ed25519": SECRET,
            "venv/lib/site.py": "",
            ".config/app.toml": "included = true\n",
            ".\x1b[2Jcleared/notes.txt": "a directory name that clears a terminal\n",
        },
    )
    (code / os.fsdecode(b"caf\xe9.txt")).write_text("latin-1 name\n")
    spec = _spec(code, code={"include": [".config/*.toml"]})
    rows = [{"id": "list", "prompt": "list", "label": "x", "metadata": {"imports": ["pkg"]}}]
    return run_harbor(directory, rows, spec, env=_env(directory), timeout=600)


def test_outside_git_only_code_reaches_the_trial(plain_dir_run: HarborRun) -> None:
    run = plain_dir_run
    assert run.returncode == 0, run.stderr
    info = run.rows["list"]["info"]
    assert info["files"] == [
        ".config/app.toml",
        "caf\\xe9.txt",
        "pkg/__init__.py",
        "staging_workflows.py",
    ]
    assert info["imports"] == {"pkg": "ok"}


def test_secrets_appear_nowhere(plain_dir_run: HarborRun) -> None:
    assert SECRET not in _everything_said(plain_dir_run)


def test_first_line_says_what_was_staged_and_left_out(plain_dir_run: HarborRun) -> None:
    first = plain_dir_run.stdout.splitlines()[0]
    assert "code: 4 files" in first, first
    assert "not a git work tree" in first, first
    for name in (".aws", ".env", ".ssh", "*.pem", "id_ed25519*", "venv"):
        assert name in first, (name, first)
    assert "\x1b" not in plain_dir_run.stdout
    assert ".\\x1b[2Jcleared" in first, first


def test_no_staging_copy_survives(plain_dir_run: HarborRun) -> None:
    assert _leftover_staging(plain_dir_run.out_dir.parent) == []


# -- in a git work tree -----------------------------------------------------------------


@pytest.fixture(scope="module")
def git_tree_run(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> HarborRun:
    """A git work tree whose committed code has an ``env/`` subpackage and a ``build``
    module, a submodule, an ignored file and an untracked ``.env``."""
    directory = tmp_path_factory.mktemp("staging-git")
    helper = directory / "helperrepo"
    _write(helper, {"helperlib/__init__.py": "VALUE = 2\n"})
    _git(helper, "init", "-q")
    _git(helper, "add", "-A")
    _git(helper, "commit", "-qm", "helper")
    code = _code_dir(
        directory / "code",
        {
            "agent/__init__.py": "",
            "agent/env/__init__.py": "VALUE = 1\n",
            "agent/build.py": "VALUE = 3\n",
            ".gitignore": "ignored.txt\n",
        },
    )
    _git(code, "init", "-q")
    _git(code, "submodule", "add", "-q", str(helper), "vendor")
    _git(code, "add", "-A")
    _git(code, "commit", "-qm", "code")
    _write(code, {"ignored.txt": SECRET, ".env": f"KEY={SECRET}\n", "untracked.py": ""})
    imports = ["agent.env", "agent.build", "vendor.helperlib"]
    rows = [{"id": "list", "prompt": "list", "label": "x", "metadata": {"imports": imports}}]
    return run_harbor(directory, rows, _spec(code), env=_env(directory), timeout=600)


def test_git_tree_stages_what_git_would_commit(git_tree_run: HarborRun) -> None:
    run = git_tree_run
    assert run.returncode == 0, run.stderr
    info = run.rows["list"]["info"]
    assert info["imports"] == {"agent.env": "ok", "agent.build": "ok", "vendor.helperlib": "ok"}
    assert info["files"] == [
        "agent/__init__.py",
        "agent/build.py",
        "agent/env/__init__.py",
        "staging_workflows.py",
        "untracked.py",
        "vendor/helperlib/__init__.py",
    ]
    first = run.stdout.splitlines()[0]
    assert "code: 6 files" in first and "as git would commit them" in first, first
    assert SECRET not in _everything_said(run)


@pytest.mark.parametrize("prebuild", ["--prebuild", "--no-prebuild"])
def test_repository_git_cannot_read_is_refused(tmp_path: Path, prebuild: str) -> None:
    code = _code_dir(tmp_path / "code", {".env": f"KEY={SECRET}\n"})
    _git(code, "init", "-q")
    # what git says for a checkout owned by another user (safe.directory)
    env = _env(tmp_path, GIT_TEST_ASSUME_DIFFERENT_OWNER="1")
    rows = [{"id": "list", "prompt": "list", "label": "x"}]
    run = run_harbor(tmp_path, rows, _spec(code), prebuild, env=env, timeout=300)
    assert run.returncode == 2, run.stdout + run.stderr
    assert len(run.error_lines) == 1, run.stderr
    line = run.error_lines[0]
    assert line.startswith("error: ") and str(code) in line, line
    assert f"git config --global --add safe.directory {code}" in line, line
    assert run.rows == {}
    assert _leftover_staging(tmp_path) == []
    assert SECRET not in _everything_said(run)


def test_file_holding_a_secret_of_the_run_stays_out(tmp_path: Path) -> None:
    """A value the run masks (here an ``--env-file`` one) in a file of the code dir would
    be baked into every trial: that file stays out, and the first line names it."""
    code = _code_dir(tmp_path / "code", {"settings.py": f'TOKEN = "{SECRET}"\n'})
    env_file = tmp_path / "tool.env"
    env_file.write_text(f"TOOL_TOKEN={SECRET}\n")
    rows = [{"id": "list", "prompt": "list", "label": "x"}]
    env = _env(tmp_path)
    run = run_harbor(tmp_path, rows, _spec(code), "--env-file", str(env_file), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.rows["list"]["info"]["files"] == ["staging_workflows.py"]
    first = run.stdout.splitlines()[0]
    assert "code: 1 file " in first and "settings.py (holds a secret the run masks)" in first
    assert SECRET not in _everything_said(run)


def _start_building(tmp_path: Path) -> subprocess.Popen[str]:
    """Start ``osmo-run harbor`` with a code dir of its own (a fresh prebuilt image) and
    return once the image's build context exists (inside the run's staging directory)."""
    code = _code_dir(tmp_path / "code", {"unique.txt": f"{time.time_ns()}\n"})
    (code / "blob.bin").write_bytes(os.urandom(20 * 2**20))  # a build that takes a while
    rows = [{"id": "list", "prompt": "list", "label": "x"}]
    command = [str(OSMO_RUN), "harbor", *write_inputs(tmp_path, rows, _spec(code))]
    command += ["-o", str(tmp_path / "out" / "results.jsonl"), "--display", "plain"]
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list((tmp_path / "tmpdir").glob("osmo-run-*/image-*")):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process(process)
            pytest.fail(f"the image build never started: {process.communicate()}")
        time.sleep(0.05)
    return process


def test_ctrl_c_while_the_image_builds_leaves_no_staging_copy(tmp_path: Path) -> None:
    """Ctrl-C once the prebuilt image's build context exists: the run ends at once and
    neither the staging copy nor the build context survives."""
    process = _start_building(tmp_path)
    try:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        stop_process(process)
    assert process.returncode in (2, 130), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    assert _leftover_staging(tmp_path) == []


def test_a_killed_runs_staging_copy_is_removed_by_the_next_run(tmp_path: Path) -> None:
    """SIGKILL leaves no time to clean: the next run removes what the killed one left
    (its staging copy and build context), and nothing of a run still going."""
    process = _start_building(tmp_path)
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    left = _leftover_staging(tmp_path)
    assert left, "the killed run left nothing to remove"
    alive = tmp_path / "tmpdir" / "osmo-run-alive0000-x"
    alive.mkdir()
    rows = [{"id": "list", "prompt": "list", "label": "x"}]
    code = _code_dir(tmp_path / "second", {})
    with (alive / "owner.lock").open("w") as owner:  # a run still going: this process
        fcntl.flock(owner, fcntl.LOCK_EX)
        run = run_harbor(tmp_path / "next", rows, _spec(code), env=_env(tmp_path), timeout=600)
    assert run.returncode == 0, run.stderr
    assert _leftover_staging(tmp_path) == [alive.name]


def test_dataset_and_run_output_inside_the_code_dir_stay_out(tmp_path: Path) -> None:
    """Dataset, spec and ``-o out/`` all in the code dir (as in a quick experiment): the
    trial gets neither the dataset (its labels) nor the run's own files."""
    code = _code_dir(tmp_path / "code", {})
    (code / "out").mkdir()
    (code / "out" / "results.attempts.jsonl").write_text("{}\n")  # left by an earlier run
    rows = [{"id": "list", "prompt": "list", "label": "the-label"}]
    run = run_harbor(code, rows, _spec(code), env=_env(tmp_path), timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.rows["list"]["info"]["files"] == ["spec.yaml", "staging_workflows.py"]
