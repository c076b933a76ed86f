"""Exec environments never reach the ``docker compose`` command line (issue 28, item 2):
whatever the names and values, ``-e NAME=VALUE`` becomes ``-e NAME`` and the value moves
to the compose process's own environment; the command the container runs is untouched."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from osmo_run.backends.harbor.environment import names_only  # noqa: E402

NAMES = st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True)
VALUES = st.text(st.characters(blacklist_characters="\0"), max_size=80)
COMMANDS = st.text(st.characters(blacklist_characters="\0"), max_size=200)


def _harbor_exec(env: dict[str, str], cwd: str | None, user: str | None, command: str) -> list[str]:
    """The ``exec`` subcommand as Harbor's Docker environment builds it."""
    args = ["exec"]
    if cwd:
        args += ["-w", cwd]
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    if user is not None:
        args += ["-u", user]
    return [*args, "main", "bash", "-c", command]


@given(
    st.dictionaries(NAMES, VALUES, max_size=5),
    st.none() | st.text(min_size=1, max_size=20),
    st.none() | st.sampled_from(["root", "1000", "-e"]),
    COMMANDS,
)
def test_values_leave_the_command_line_and_the_command_stays(
    env: dict[str, str], cwd: str | None, user: str | None, command: str
) -> None:
    args, values = names_only(_harbor_exec(env, cwd, user, command))
    assert values == env
    expected = ["exec", *(["-w", cwd] if cwd else [])]
    for key in env:
        expected += ["-e", key]
    expected += ["-u", user] if user is not None else []
    assert args == [*expected, "main", "bash", "-c", command]


def test_other_compose_commands_are_left_alone() -> None:
    command = ["up", "-d", "-e", "A=B"]
    assert names_only(command) == (command, {})
