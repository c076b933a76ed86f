"""The rules of what of a code dir is staged for Harbor trials (issue 28, items 1, 6, 18),
as rule families over generated trees: outside git, in a git work tree, with
``code.include``, and with the run's secrets in a file. The real runs are in
``tests/harbor/test_staging.py``; these try many more trees than Docker could.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from osmo_run.backends.harbor.runtime import stage_user_code  # noqa: E402
from osmo_run.errors import InputError  # noqa: E402

DIRS = ["pkg", "env", "build", "dist", "venv", ".ssh", ".aws", ".config", "runs", "sub"]
FILES = [
    "a.py",
    "b.txt",
    ".env",
    "id_rsa",
    "id_rsa.pub",
    "server.pem",
    "tls.KEY",
    "credentials",
    "cert.p12",
    "settings.toml",
    os.fsdecode(b"caf\xe9.py"),
    "new\nline.py",
]
DOT_OR_SECRET = {".env", "id_rsa", "id_rsa.pub", "server.pem", "tls.KEY", "credentials", "cert.p12"}
EXCLUDED_OUTSIDE_GIT = {"env", "build", "dist", "venv", "runs"}

paths = st.lists(
    st.tuples(st.lists(st.sampled_from(DIRS), max_size=2), st.sampled_from(FILES)).map(
        lambda t: Path(*t[0], t[1])
    ),
    min_size=1,
    max_size=12,
    unique=True,
)


def _tree(root: Path, files: list[Path]) -> set[Path]:
    """Write ``files`` under ``root`` (a path that is also a directory is dropped); return
    those written."""
    written = set()
    for relative in files:
        target = root / relative
        if any(p in written for p in relative.parents) or any(
            relative in w.parents for w in written
        ):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"content of " + os.fsencode(relative) + b"\n")
        written.add(relative)
    return written


def _staged(dest: Path) -> set[Path]:
    return {p.relative_to(dest) for p in dest.rglob("*") if p.is_file()}


def _left_out(relative: Path, *, outside_git: bool) -> bool:
    if any(part.startswith(".") for part in relative.parts) or relative.name in DOT_OR_SECRET:
        return True
    return outside_git and bool(set(relative.parts) & EXCLUDED_OUTSIDE_GIT)


def _git(cwd: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@e"
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=paths)
def test_outside_git_stages_every_file_but_the_left_out_ones(files: list[Path]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        source, dest = Path(scratch, "code"), Path(scratch, "staged")
        written = _tree(source, files)
        staged = stage_user_code(source, dest)
        expected = {f for f in written if not _left_out(f, outside_git=True)}
        assert _staged(dest) == expected
        assert staged.files == len(expected) and not staged.from_git


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=paths, ignore_build=st.booleans())
def test_in_git_stages_what_git_would_commit_but_dot_files_and_secrets(
    files: list[Path], ignore_build: bool
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        source, dest = Path(scratch, "code"), Path(scratch, "staged")
        source.mkdir()
        _git(source, "init", "-q")
        written = _tree(source, files)
        if ignore_build:
            (source / ".gitignore").write_text("build/\n")
        _git(source, "add", "-A")
        _git(source, "commit", "-qm", "x", "--allow-empty")
        staged = stage_user_code(source, dest)
        expected = {
            f
            for f in written
            if not _left_out(f, outside_git=False) and not (ignore_build and "build" in f.parts)
        }
        assert _staged(dest) == expected
        assert staged.from_git or not expected


@settings(max_examples=40, deadline=None)
@given(files=paths, pattern=st.sampled_from(["*.pem", ".ssh/*", "**", "*", ".env", "pkg/*"]))
def test_include_adds_exactly_the_files_it_names(files: list[Path], pattern: str) -> None:
    import fnmatch

    with tempfile.TemporaryDirectory() as scratch:
        source, dest = Path(scratch, "code"), Path(scratch, "staged")
        written = _tree(source, files)
        stage_user_code(source, dest, include=(pattern,))
        expected = {
            f
            for f in written
            if not _left_out(f, outside_git=True) or fnmatch.fnmatchcase(f.as_posix(), pattern)
        }
        assert _staged(dest) == expected


@settings(max_examples=40, deadline=None)
@given(
    files=paths,
    secret=st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=8, max_size=40
    ),
    data=st.data(),
)
def test_a_file_holding_a_secret_stays_out(
    files: list[Path], secret: str, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        source, dest = Path(scratch, "code"), Path(scratch, "staged")
        written = sorted(f for f in _tree(source, files) if not _left_out(f, outside_git=True))
        if not written:
            return
        holder = data.draw(st.sampled_from(written))
        (source / holder).write_bytes(b"before" + secret.encode() + b"after")
        staged = stage_user_code(source, dest, secrets=(secret,))
        assert _staged(dest) == set(written) - {holder}
        assert all(secret.encode() not in p.read_bytes() for p in dest.rglob("*") if p.is_file())
        assert secret not in staged.describe()
        assert f"{holder.as_posix()} (holds a secret" in " ".join(staged.left_out)


def test_a_repository_git_cannot_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "code"
    source.mkdir()
    _git(source, "init", "-q")
    (source / ".env").write_text("KEY=x\n")
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")
    with pytest.raises(InputError, match=r"safe\.directory"):
        stage_user_code(source, tmp_path / "staged")
    assert not (tmp_path / "staged").exists()


@pytest.mark.parametrize("in_git", [True, False])
def test_the_runs_own_output_inside_the_code_dir_is_never_staged(
    tmp_path: Path, in_git: bool
) -> None:
    """``-o`` inside the code dir (a git tree that does not ignore it, or no git): the
    run's directory, its results beside the code, and its trials stay out."""
    source = tmp_path / "code"
    source.mkdir()
    if in_git:
        _git(source, "init", "-q")
    _tree(
        source,
        [
            Path("flow.py"),
            Path("out/results.jsonl"),
            Path("results.jsonl"),
            Path("results.manifest.json"),
            Path("trials/t1/agent/log.txt"),
        ],
    )
    skip = (source / "out", source / "results.jsonl", source / "results.manifest.json")
    staged = stage_user_code(source, tmp_path / "staged", skip=(*skip, source / "trials"))
    assert _staged(tmp_path / "staged") == {Path("flow.py")}
    assert staged.files == 1
