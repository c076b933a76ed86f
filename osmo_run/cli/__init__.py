"""The ``osmo-run`` command line. Parses flags and delegates; heavy imports happen inside
commands so ``osmo-run --help`` stays quick and ``osmo-run local`` never imports harbor."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated

import typer

from osmo_run.cli.cleanup import cleanup
from osmo_run.cli.harbor import harbor
from osmo_run.cli.init import init
from osmo_run.cli.local import local
from osmo_run.cli.options import expand_bare_retry_errors
from osmo_run.cli.reports import regrade, report
from osmo_run.cli.serve import serve
from osmo_run.cli.validate import validate
from osmo_run.cli.view import view
from osmo_run.errors import ExitCode, OsmoRunError

app = typer.Typer(
    name="osmo-run",
    help="Run a dataset (JSONL, CSV or Parquet) through an agent workflow and grader, "
    "in this process or in Harbor trials.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, pwsh)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from osmo_run import __version__

        typer.echo(f"osmo-run {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print osmo-run's version and exit.",
        ),
    ] = False,
) -> None:
    """Run a dataset (JSONL, CSV or Parquet) through an agent workflow and grader, in this
    process or in Harbor trials."""


app.command()(local)
app.command()(harbor)
app.command()(serve)
app.command()(report)
app.command()(regrade)
app.command()(validate)
app.command()(cleanup)
app.command()(view)
app.command()(init)


@app.command()
def schema() -> None:
    """Print the run spec's JSON Schema (for editor completion and validation)."""
    from osmo_run.run.configuring.spec import spec_json_schema

    typer.echo(spec_json_schema())


def _wants_json(args: list[str]) -> bool:
    """Whether the command line asks for ``--json`` (before any ``--``)."""
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _json_refusal(code: int, error: str) -> None:
    """``--json``'s one object on stdout for a run refused before it started."""
    verdict = {"exit_code": code, "passed": False, "error": error, "summary": None}
    sys.stdout.write(json.dumps(verdict) + "\n")


def run_cli(args: list[str]) -> int:
    """Run the command line ``args`` in this process and return its exit code: expected
    errors print one ``error:`` line each, never a traceback; a bug prints one line and
    returns 3 (``OSMO_RUN_DEBUG=1`` raises it instead). With ``--json``, a command refused
    before it ran (exit 2) still prints one JSON object on stdout, with its ``error``."""
    code: int = ExitCode.OK
    try:
        app(args=expand_bare_retry_errors(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        if code == ExitCode.INVALID_INPUT and _wants_json(args):  # a usage error (click's)
            _json_refusal(code, "invalid command line (the error is on stderr)")
    except OsmoRunError as exc:
        for line in str(exc).splitlines() or [type(exc).__name__]:
            print(f"error: {line}", file=sys.stderr)
        code = exc.exit_code
        if _wants_json(args):
            _json_refusal(code, str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = ExitCode.INTERRUPTED
    except Exception as exc:
        if os.environ.get("OSMO_RUN_DEBUG"):
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in osmo-run; rerun with OSMO_RUN_DEBUG=1 for the traceback "
            "and report it.",
            file=sys.stderr,
        )
        code = ExitCode.INTERNAL_ERROR
    return code


def main() -> None:
    """Console entry point: :func:`run_cli` on ``sys.argv``.

    Leaves with ``os._exit`` once output is flushed, so a workflow abandoned for ignoring
    cancellation (or blocking a thread forever) cannot keep the process alive.
    """
    code = run_cli(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
