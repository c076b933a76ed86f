"""``--env-file``: variables (an API key, a cloud token) from a dotenv file into the run's
environment, where ``api_key_env``, workflows, isolated child processes and Harbor's
environments read them.

Parsed by python-dotenv (``KEY=VALUE``, ``export KEY=VALUE``, quotes, multi-line quoted
values, ``# comments``, ``${VAR}`` expansion). The values are secrets: those of
:data:`SECRET_MIN_CHARS` or more are masked in everything a run writes and shows
(:func:`env_file_secrets`), and no error holds the text of a line that fails to parse.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from osmo_run.errors import EnvFileError

_FORMAT = "write KEY=VALUE (or export KEY=VALUE), a # comment or a blank line"


def read_env_file(path: Path) -> dict[str, str]:
    """The variables ``path`` sets, in file order, ``${VAR}`` expanded (from the file's
    earlier lines, then the environment).

    Raises :class:`EnvFileError` for a file that cannot be read as UTF-8, and naming
    ``path:line`` (never the line's text) for a line that is not ``KEY=VALUE`` or a key
    without ``=``.

    A file is read once per process: the run sets its variables and masks its values from
    the same reading, so a pipe (``--env-file <(sops -d .env)``), which gives its text only
    once, is masked too. A regular file changed since is read again.
    """
    try:
        key = _reading_key(path)
    except OSError:
        key = None
    if key is not None and key in _READ:
        return dict(_READ[key])
    values = _parse_env_file(path)
    if key is not None:
        _READ[key] = dict(values)
    return values


_READ: dict[tuple[str, int, int, int], dict[str, str]] = {}
"""The values of each env file read in this process, by :func:`_reading_key`."""


def _reading_key(path: Path) -> tuple[str, int, int, int]:
    """What identifies one reading of ``path``: its name and, for a regular file, its
    inode, size and modification time (a pipe is the same pipe for as long as it is open)."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        return (str(path), 0, 0, 0)
    return (str(path.resolve()), info.st_ino, info.st_size, info.st_mtime_ns)


def _parse_env_file(path: Path) -> dict[str, str]:
    from dotenv import dotenv_values
    from dotenv.parser import parse_stream

    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_ENV_FILE_BYTES + 1)
        if len(data) > MAX_ENV_FILE_BYTES:
            raise EnvFileError(
                f"{path}: larger than {MAX_ENV_FILE_BYTES // 2**20} MiB; an env file holds "
                "variables, pass the dotenv file"
            )
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise EnvFileError(f"{path}: env file not found") from None
    except IsADirectoryError:
        raise EnvFileError(f"{path}: is a directory; pass the dotenv file") from None
    except UnicodeDecodeError:
        raise EnvFileError(f"{path}: not UTF-8 text; save the env file as UTF-8") from None
    except OSError as exc:
        raise EnvFileError(f"{path}: cannot read the env file ({exc.strerror})") from None
    for binding in parse_stream(io.StringIO(text)):
        line = _first_line(binding.original.string, binding.original.line)
        if binding.error:
            raise EnvFileError(f"{path}:{line}: not a variable assignment; {_FORMAT}")
        if binding.key is not None and binding.value is None:
            raise EnvFileError(f"{path}:{line}: {binding.key} has no '='; write {binding.key}=")
    values = dotenv_values(stream=io.StringIO(text), interpolate=True)
    return {key: value for key, value in values.items() if value is not None}


MAX_ENV_FILE_BYTES = 2**20
"""The most an env file may hold (``--env-file /dev/zero`` would otherwise never end)."""


def _first_line(chunk: str, line: int) -> int:
    """The line of ``chunk``'s first non-blank character (the parser counts a bad
    statement from the blank lines before it)."""
    stripped = chunk.lstrip()
    return line + chunk[: len(chunk) - len(stripped)].count("\n")


SECRET_MIN_CHARS = 8
"""Values this long or longer are masked like API keys in everything a run writes and shows;
shorter ones (a port, a flag, a region) are no secrets, and masking them would blank every
``1`` or ``true`` in the run's text."""


def env_file_secrets(path: Path | None) -> tuple[str, ...]:
    """The values of ``path`` (:func:`read_env_file`) that a run masks: those of at least
    :data:`SECRET_MIN_CHARS` characters. ``()`` without a file."""
    if path is None:
        return ()
    return tuple(v for v in read_env_file(path).values() if len(v) >= SECRET_MIN_CHARS)


def apply_env_file(path: Path) -> list[str]:
    """Set the variables of ``path`` (:func:`read_env_file`) in ``os.environ``, over any
    already set: the file named on the command line wins. Returns the names set.

    Raises :class:`EnvFileError` as :func:`read_env_file` does, before setting any.
    """
    values = read_env_file(path)
    os.environ.update(values)
    return list(values)
