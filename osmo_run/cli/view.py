"""``osmo-run view``: look at runs in a browser, or write one run as a self-contained HTML
report (``--export``) or as Harbor ATIF trajectories (``--export-atif``). Read-only."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from osmo_run.view.catalog import Catalog


def view(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Run directories, results files, or folders holding runs (found by their "
            "manifests) [default: runs/ if it exists, else the current directory]."
        ),
    ] = None,
    port: Annotated[
        int, typer.Option("--port", "-p", min=0, max=65535, help="Port (0 picks a free one).")
    ] = 7860,
    host: Annotated[
        str,
        typer.Option(help="Address to listen on. Anything but loopback exposes the runs."),
    ] = "127.0.0.1",
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the URL; do not open a browser.")
    ] = False,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export",
            help="Write the run as one self-contained HTML file (no network) and exit.",
        ),
    ] = None,
    export_all: Annotated[
        bool,
        typer.Option(
            "--export-all",
            help="With --export: every row and every transcript, however large the run.",
        ),
    ] = False,
    sample: Annotated[
        int,
        typer.Option(
            "--export-sample",
            min=0,
            help="With --export: transcripts of this many successful rollouts, chosen at "
            "random (seeded), besides every failed one.",
        ),
    ] = 100,
    export_atif: Annotated[
        Path | None,
        typer.Option(
            "--export-atif",
            help="Write each rollout as a Harbor ATIF trajectory "
            "(DIR/<rollout>/agent/trajectory.json) and exit.",
        ),
    ] = None,
) -> None:
    """Browse runs (runs list, run page with charts and rows, row transcripts, comparisons)."""
    try:
        from osmo_run.view.catalog import Catalog
    except ImportError as exc:  # pragma: no cover - only without the extra installed
        from osmo_run.errors import BackendUnavailable

        raise BackendUnavailable(
            f"osmo-run view needs its web extra ({exc.name} is missing): "
            "pip install 'osmo-run[view]'"
        ) from None
    targets = paths or [Path("runs") if Path("runs").is_dir() else Path()]
    if export is not None or export_atif is not None:
        _export(Catalog.open(targets), targets, export, export_all, sample, export_atif)
    else:
        _serve(Catalog.open(targets), host, port, open_browser=not no_browser)


def _export(
    catalog: Catalog,
    targets: list[Path],
    export: Path | None,
    export_all: bool,
    sample: int,
    export_atif: Path | None,
) -> None:
    """Write the one run of ``catalog`` as an HTML report and/or ATIF trajectories."""
    from osmo_run.errors import InputError

    if len(catalog.runs) != 1:
        raise InputError(
            f"--export and --export-atif take one run; {', '.join(map(str, targets))} "
            f"hold {len(catalog.runs)}: pass one run directory or results file"
        )
    (entry,) = catalog.runs.values()
    if export is not None:
        from osmo_run.view.export import export_html

        written = export_html(entry, export, sample=None if export_all else sample)
        typer.echo(f"wrote {export} ({written.size:,} bytes): {written.description}")
    if export_atif is not None:
        from osmo_run.view.atif import export_atif as write_atif

        done = write_atif(entry, export_atif)
        typer.echo(f"wrote {done.written} ATIF trajectories to {export_atif}{done.note}")


def _serve(catalog: Catalog, host: str, port: int, open_browser: bool) -> None:
    """Serve ``catalog``'s runs on ``host:port`` until Ctrl-C."""
    from osmo_run.view.index import cache_dir
    from osmo_run.view.server import Viewer, allowed_hosts, bind, create_app, serve

    viewer = Viewer(catalog, cache_dir())
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{bound_port}/"
    app = create_app(viewer, allowed_hosts(host, bound_port))
    viewer.start_indexing()
    if host not in {"127.0.0.1", "localhost", "::1"}:
        print(
            f"warning: listening on {host}: anyone who can reach this address can read "
            "these runs (transcripts, errors, artifacts); the viewer has no login",
            file=sys.stderr,
        )
    count = len(catalog.runs)
    typer.echo(f"osmo-run view: {count} run{'s' if count != 1 else ''} at {url} (Ctrl-C stops)")
    sys.stdout.flush()
    if open_browser:
        if (
            os.environ.get("DISPLAY")
            or os.environ.get("WAYLAND_DISPLAY")
            or sys.platform
            in {
                "darwin",
                "win32",
            }
        ):
            import webbrowser

            webbrowser.open(url)
        else:
            typer.echo("no display here: open the URL in a browser (or pass --no-browser)")
    serve(app, sock)
