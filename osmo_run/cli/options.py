"""Helpers the commands share: the console, and parsing flags whose values need checks
beyond their types (display, gates, retry categories)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from osmo_run.run.reporting.gates import Gates

OverwriteOption = Annotated[
    bool, typer.Option(help="Replace an output file that already holds results.")
]
EnvFileOption = Annotated[
    Path | None,
    typer.Option(
        "--env-file",
        help="Dotenv file (KEY=VALUE lines) of variables, such as the API key api_key_env "
        "names; they win over the environment's. Values of 8+ characters are masked (***) in "
        "all the run writes and shows.",
    ),
]


def console(stderr: bool = False) -> Console:
    """The console a command prints through: rich's detection (colours on a terminal,
    ``FORCE_COLOR`` for colours elsewhere, https://force-color.org), except that
    ``NO_COLOR`` (any non-empty value, https://no-color.org) drops every style, bold
    included, and wins over ``FORCE_COLOR``."""
    from rich.console import Console

    no_color = os.environ.get("NO_COLOR", "") != ""
    return Console(highlight=False, stderr=stderr, color_system=None if no_color else "auto")


def gates_from_flags(
    fail_under: float | None,
    min_pass_rate: float | None,
    max_errors: list[str] | None,
    max_error_rate: list[str] | None,
) -> Gates:
    """The :class:`~osmo_run.run.reporting.gates.Gates` the flags ask for. Raises
    :class:`~osmo_run.errors.InputError` for a threshold outside its range (NaN included:
    a gate that can never fail)."""
    from osmo_run.run.reporting.gates import Gates, check_threshold, parse_budget

    check_threshold("--fail-under", fail_under, "a finite mean reward")
    check_threshold("--min-pass-rate", min_pass_rate, "a fraction from 0 to 1", (0.0, 1.0))
    budgets = [parse_budget(v, rate=False) for v in max_errors or []]
    budgets += [parse_budget(v, rate=True) for v in max_error_rate or []]
    return Gates(fail_under=fail_under, min_pass_rate=min_pass_rate, budgets=tuple(budgets))


def check_display(display: str) -> None:
    from osmo_run.errors import InputError

    if display not in {"auto", "live", "plain", "none"}:
        raise InputError(f"--display: {display!r} is not one of auto, live, plain, none")


def expand_bare_retry_errors(args: list[str]) -> list[str]:
    """``args`` with ``all`` after a bare ``--retry-errors``: the parser has no options with
    an optional value, so ``--retry-errors`` followed by nothing, another option or the
    dataset (anything but a comma-separated list of names) means every category."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        out.append(arg)
        if arg == "--retry-errors":
            value = args[i + 1] if i + 1 < len(args) else ""
            if not re.fullmatch(r"[\w ,]+", value):
                out.append("all")
    return out


def retry_categories(value: str | None) -> frozenset[str] | None:
    """``--retry-errors`` as a set of categories (empty: every category); ``None`` if absent.

    Raises :class:`~osmo_run.errors.InputError` naming an unknown category.
    """
    from osmo_run.errors import InputError
    from osmo_run.sdk.types import ErrorCategory

    if value is None:
        return None
    if value == "all":
        return frozenset()
    names = frozenset(part.strip() for part in value.split(",") if part.strip())
    known = {c.value for c in ErrorCategory}
    unknown = sorted(names - known)
    if unknown:
        raise InputError(
            f"--retry-errors: {', '.join(unknown)} is not an error category "
            f"({', '.join(sorted(known))})"
        )
    return names
