"""What a trial environment needs from the host: the osmo-run SDK and the user's code.

Both are staged once per run into a private directory (the SDK and the built-in graders,
both stdlib-only, not the CLI or backends; of the user's code what belongs: in a git work
tree what git would commit, elsewhere every file but caches and virtual environments by
name, never dot-files, secret-looking files or files holding the run's secrets; see
:func:`stage_user_code`) and then uploaded to each trial, or baked into the prebuilt
image. Image layers keep what they get for good, so what is left out here never reaches
them.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import osmo_run
from osmo_run.errors import InputError

CONTAINER_ROOT = "/opt/osmo-run"
CONTAINER_RUNTIME_DIR = f"{CONTAINER_ROOT}/runtime"
CONTAINER_CODE_DIR = f"{CONTAINER_ROOT}/code"
CONTAINER_DEPS_DIR = f"{CONTAINER_ROOT}/deps"
"""The workflow's requirements, installed (``site-packages`` layout), after the runtime on
the runner's ``PYTHONPATH``: the staged SDK always wins over a copy a requirement brings."""

EXCLUDED_NAMES = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "env",
        "__pycache__",
        "node_modules",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        ".tox",
        ".nox",
        "runs",
        "dist",
        "build",
        ".idea",
        ".vscode",
        ".DS_Store",
    }
)
"""Directory and file names never copied from the user's code directory."""

MAX_CODE_BYTES = 200 * 1024 * 1024


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {
        name
        for name in names
        if name in EXCLUDED_NAMES
        or name.endswith((".pyc", ".egg-info"))
        or Path(directory, name).is_symlink()
    }


RUNTIME_PACKAGES = ("sdk", "graders", "integrations")
"""The subpackages trials import: the SDK and the built-in graders (stdlib-only; their
optional libraries, math-verify and jsonschema, come with the image or the requirements),
and the agent-framework integrations (whose frameworks come with the requirements)."""


def stage_runtime(dest: Path) -> Path:
    """Copy the SDK, the built-in graders and the integrations (``osmo_run/__init__.py``,
    ``errors.py``, :data:`RUNTIME_PACKAGES`) under ``dest``."""
    package = Path(osmo_run.__file__).parent
    target = dest / "osmo_run"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("__init__.py", "errors.py"):
        shutil.copy2(package / name, target / name)
    for name in RUNTIME_PACKAGES:
        shutil.copytree(package / name, target / name, ignore=_ignore, dirs_exist_ok=True)
    return dest


SECRET_NAMES = (
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    "*.ovpn",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "_netrc",
    "credentials",
    "credentials.json",
    "*.credentials",
    "service-account*.json",
    "secrets.json",
    "secrets.yaml",
    "secrets.yml",
    "secrets.toml",
    "*.env",
)
"""File names (globs, case-insensitive) never staged unless ``code.include`` names them:
keys, certificates and credential stores (dot-files such as ``.env``, ``.netrc`` and
``.ssh/`` are left out as dot-files)."""


SECRET_NOTE = "(holds a secret the run masks)"


@dataclass(frozen=True)
class StagedCode:
    """What :func:`stage_user_code` copied: ``files`` and ``size`` (bytes); ``from_git``
    when the files are those git would commit; ``left_out``: names that kept files out
    (sorted; dot-files, secret-looking names, and outside git :data:`EXCLUDED_NAMES`)."""

    source: Path
    files: int
    size: int
    from_git: bool
    left_out: tuple[str, ...] = ()
    ignored_by_git: bool = False
    """In a work tree whose git lists none of it (ignored whole): taken by name rules."""

    def describe(self) -> str:
        """One clause for the run's first line."""
        kind = "as git would commit them" if self.from_git else "not a git work tree"
        if self.ignored_by_git:
            kind = "git ignores all of it, so by name"
        source = _printable(str(self.source))
        files = f"{self.files} file{'' if self.files == 1 else 's'}"
        text = f"code: {files} ({_size(self.size)}) staged from {source}, {kind}"
        if self.left_out:
            first = sorted(self.left_out, key=lambda name: (SECRET_NOTE not in name, name))
            names = [_printable(name) for name in first[:8]]
            shown = ", ".join(names) + (" …" if len(self.left_out) > 8 else "")
            text += f"; left out: {shown} (code.include adds files)"
        return text


def _printable(name: str) -> str:
    """``name`` safe on a terminal: control characters and undecodable bytes escaped."""
    if name.isprintable():
        return name
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in name)


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / 2**20:.1f} MB"


def _git(source: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(source), *args],
        capture_output=True,
        check=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    ).stdout


def _enclosing_repository(source: Path) -> Path | None:
    """The nearest directory at or above ``source`` holding a ``.git`` entry, if any."""
    for directory in (source, *source.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return None


def _git_files(source: Path) -> list[Path] | None:
    """Files git would commit under ``source``: tracked ones, submodules' included, and
    untracked ones git does not ignore; ``None`` when ``source`` is in no repository.

    Raises :class:`InputError` when ``source`` is in a repository git cannot read (owned
    by another user, ``safe.directory``; or no git installed): staging every file instead
    would ignore ``.gitignore`` and could bake secrets into the trial's image.
    """
    repository = _enclosing_repository(source)
    if repository is None:
        return None
    try:
        tracked = _git(source, "ls-files", "-z", "--cached", "--recurse-submodules")
        untracked = _git(source, "ls-files", "-z", "--others", "--exclude-standard")
    except FileNotFoundError:
        raise InputError(
            f"{source}: it is in the git repository {repository}, but git is not installed "
            "here; install git so osmo-run stages the files git would commit (not .gitignored "
            "ones), or pass a --user-code-dir outside the repository"
        ) from None
    except subprocess.CalledProcessError as exc:
        said = exc.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = said[0].removeprefix("fatal: ") if said else f"exit {exc.returncode}"
        raise InputError(
            f"{source}: git cannot read the repository {repository} ({reason}); run "
            f"`git config --global --add safe.directory {repository}` or give the checkout "
            "to the user running osmo-run, so only the files git would commit are staged"
        ) from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise InputError(f"{source}: cannot list the files git would commit: {exc}") from None
    names = (tracked + b"\0" + untracked).split(b"\0")
    return [Path(os.fsdecode(name)) for name in dict.fromkeys(names) if name]


def _walk_files(source: Path, include: tuple[str, ...]) -> tuple[list[Path], set[str]]:
    """Every regular file under ``source``, and the names of the directories left out: one
    whose name is left out by default is entered only when an ``include`` pattern may
    reach into it."""
    files: list[Path] = []
    pruned: set[str] = set()
    for root, dirs, names in os.walk(source):
        relative_root = Path(root).relative_to(source)
        kept = []
        for name in dirs:
            relative = relative_root / name
            reason = _left_out_by(relative, from_git=False)
            if name in (".git", ".hg", ".svn") or Path(root, name).is_symlink():
                continue
            if reason is not None and not _may_include(relative, include):
                pruned.add(reason)
                continue
            kept.append(name)
        dirs[:] = kept
        files += [relative_root / name for name in sorted(names)]
    return files, pruned


def _may_include(directory: Path, include: tuple[str, ...]) -> bool:
    """Whether a file under ``directory`` may match one of ``include``: a pattern's part
    before its first wildcard leads into it, or stops above it (``*`` matches ``/`` too)."""
    inside = directory.as_posix() + "/"
    for pattern in include:
        literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
        if literal.startswith(inside) or inside.startswith(literal):
            return True
    return False


def _left_out_by(relative: Path, *, from_git: bool) -> str | None:
    """The name that keeps ``relative`` out of the staged code, or ``None``: a dot-file or
    dot-directory, a secret-looking file name, and (outside git, where ``.gitignore`` says
    nothing) a cache or virtual environment name."""
    for part in relative.parts:
        if part.startswith("."):
            return part
        if not from_git and part in EXCLUDED_NAMES:
            return part
    name = relative.name.lower()
    if name.endswith((".pyc", ".egg-info")) and not from_git:
        return "*" + Path(name).suffix
    return next((p for p in SECRET_NAMES if fnmatch.fnmatchcase(name, p)), None)


def _included(relative: Path, include: tuple[str, ...]) -> bool:
    text = relative.as_posix()
    return any(fnmatch.fnmatchcase(text, pattern) for pattern in include)


def _holding_secrets(source: Path, files: list[Path], secrets: tuple[str, ...]) -> set[Path]:
    """Those of ``files`` whose bytes contain one of ``secrets`` (8+ characters)."""
    needles = [s.encode("utf-8", "surrogateescape") for s in secrets if len(s) >= 8]
    if not needles:
        return set()
    return {
        relative
        for relative in files
        if any(needle in (source / relative).read_bytes() for needle in needles)
    }


def _inside(source: Path, paths: tuple[Path, ...]) -> list[tuple[str, ...]]:
    """The parts (relative to ``source``) of those ``paths`` that are inside it."""
    found = []
    for path in paths:
        resolved = path.resolve()
        if resolved.is_relative_to(source) and resolved != source:
            found.append(resolved.relative_to(source).parts)
    return found


def stage_user_code(
    source: Path,
    dest: Path,
    include: tuple[str, ...] = (),
    secrets: tuple[str, ...] = (),
    skip: tuple[Path, ...] = (),
) -> StagedCode:
    """Copy the user's code from ``source`` to ``dest`` and say what was copied.

    In a git work tree: the files git would commit (``.gitignore`` applies; submodules'
    files included); elsewhere every file but caches and virtual environments
    (:data:`EXCLUDED_NAMES`). Either way never dot-files, secret-looking names
    (:data:`SECRET_NAMES`) unless an ``include`` glob (relative to ``source``) names them,
    nor links or VCS data, nor the files and directories ``skip`` names (the run's own
    output and trials, when they are inside ``source``).

    A file holding one of ``secrets`` (the values the run masks: API keys reach trials
    through the environment only) is left out, and :attr:`StagedCode.left_out` names it.

    Raises :class:`InputError` when ``source`` is not a directory, is in a repository git
    cannot read, a file cannot be read, or the files exceed ``MAX_CODE_BYTES`` (checked
    before anything is copied).
    """
    if not source.is_dir():
        raise InputError(f"{source}: --user-code-dir must be a directory")
    source = source.resolve()
    skipped = _inside(source, skip)
    listed = listed_by_git = _git_files(source)
    from_git = bool(listed)
    left_out: set[str] = set()
    if not listed:  # not a work tree, or a directory git ignores whole: take every file
        listed, left_out = _walk_files(source, include)
    files: list[Path] = []
    for relative in listed:
        path = source / relative
        if path.is_symlink() or not path.is_file() or ".git" in relative.parts:
            continue
        if any(relative.parts[: len(parts)] == parts for parts in skipped):
            continue  # the run's own output: never input of its trials
        reason = _left_out_by(relative, from_git=from_git)
        if reason is not None and not _included(relative, include):
            left_out.add(reason)
            continue
        files.append(relative)
    ignored = listed_by_git is not None and not from_git
    try:
        return _copy_checked(source, dest, files, secrets, from_git, left_out, ignored)
    except OSError as exc:
        where = _printable(exc.filename or str(source))
        raise InputError(
            f"{where}: cannot stage it for the trials ({exc.strerror or exc}); make it "
            "readable, or move it out of the code dir"
        ) from None


def _copy_checked(
    source: Path,
    dest: Path,
    files: list[Path],
    secrets: tuple[str, ...],
    from_git: bool,
    left_out: set[str],
    ignored: bool,
) -> StagedCode:
    """Copy ``files`` once they pass the size and secret checks (see
    :func:`stage_user_code`); an unreadable file raises :class:`OSError`."""
    size = sum((source / f).stat().st_size for f in files)
    if size > MAX_CODE_BYTES:
        raise InputError(
            f"{source}: the user code directory holds {size / 2**20:.0f} MB after leaving out "
            "ignored files, caches and virtual environments; pass a narrower --user-code-dir "
            "(the directory holding your workflow's package)"
        )
    holders = _holding_secrets(source, files, secrets)
    left_out |= {f"{relative.as_posix()} {SECRET_NOTE}" for relative in holders}
    files = [relative for relative in files if relative not in holders]
    size -= sum((source / relative).stat().st_size for relative in holders)
    for relative in files:
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / relative, target)
    dest.mkdir(parents=True, exist_ok=True)
    return StagedCode(source, len(files), size, from_git, tuple(sorted(left_out)), ignored)


OWNER_FILE = "owner.lock"
"""In each staging directory: a file its osmo-run process holds locked (``flock``) while
it runs. The kernel drops the lock when the process dies, however it dies, and the lock
is seen from every process sharing the file system (a process id is not: another
container's live run may have an id no process here has)."""

_held_locks: dict[Path, int] = {}
"""Descriptors of the owner files of this process's staging directories, open until
:func:`remove_staging` (or the process's end)."""


def make_staging(invocation: str) -> Path:
    """A private staging directory in the temporary directory, locked by this process
    so that a later run removes it if this one is killed before it can
    (:func:`sweep_stale_staging`)."""
    staging = Path(tempfile.mkdtemp(prefix=f"osmo-run-{invocation}-"))
    descriptor = os.open(staging / OWNER_FILE, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _held_locks[staging] = descriptor
    return staging


def remove_staging(staging: Path) -> None:
    """Remove a staging directory :func:`make_staging` made, and release its lock."""
    shutil.rmtree(staging, ignore_errors=True)
    descriptor = _held_locks.pop(staging, None)
    if descriptor is not None:
        os.close(descriptor)


def sweep_stale_staging() -> int:
    """Remove the staging directories osmo-run processes of this user that are gone left
    in the temporary directory (no process holds their owner file locked); return how
    many. Never raises."""
    removed = 0
    for entry in Path(tempfile.gettempdir()).glob("osmo-run-*"):
        try:
            if entry.is_symlink() or entry.stat().st_uid != os.getuid():
                continue
            descriptor = os.open(entry / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # not a staging directory, or not one this code made
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its run is still going
        finally:
            os.close(descriptor)
        shutil.rmtree(entry, ignore_errors=True)
        removed += 1
    return removed


def tree_digest(*roots: Path) -> str:
    """A content hash of every file under ``roots`` (paths and bytes), for image tags."""
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            digest.update(os.fsencode(path.relative_to(root)))  # names need not be UTF-8
            digest.update(path.read_bytes())
    return digest.hexdigest()
