"""The viewer's web app (Starlette) and its server (uvicorn).

Routes, all read-only (GET):

    /                               runs list (folders given are scanned again on each visit)
    /state                          each run's rollout count and state (the runs list polls it)
    /runs/{key}                     run page: summary, charts, the rows table (query string:
                                    status, category, phase, reward_min, reward_max, q, sort,
                                    order, page, per_page; fragment=1 for the live parts only)
    /runs/{key}/state               rollouts indexed, pending bytes, bad lines, state (polled)
    /runs/{key}/rows/{position}     row page
    /runs/{key}/find?row=&sample=   redirect to a row page by row id (the compare page's links)
    /runs/{key}/files/{path}        a file the run recorded (see served.py; 404 for anything else)
    /compare?a=KEY&b=KEY            two runs of one dataset compared
    /compare/row?a=&b=&row=&sample= one row's transcripts in A and in B, side by side
    /static/...                     the stylesheet and the page script

Handlers are plain functions, which Starlette runs in its thread pool; each run's index is
used under that run's lock. The first visit of a large run shows an "indexing" page that
reloads itself while a thread builds the index (about a second per 100k rows, once: the
index is cached). Every response carries a Content-Security-Policy that allows this
server's own script and style only; files are served under a sandboxing policy. The Host
header must name the address served (``TrustedHostMiddleware``), which keeps other web
pages from reading a loopback viewer through DNS rebinding.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from osmo_run.errors import InputError
from osmo_run.view.catalog import Catalog, RunEntry
from osmo_run.view.charts import fmt_seconds
from osmo_run.view.files import sniff
from osmo_run.view.index import BadLine
from osmo_run.view.pages import RunView, compare_runs
from osmo_run.view.query import QueryError, RowQuery
from osmo_run.view.render import render

PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
FILE_POLICY = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox"
INDEX_WAIT_SEC = 2.0
"""How long a request waits for a first index before showing the "indexing" page."""


class ServerLinks:
    """URLs of this server's routes."""

    def run(self, key: str, query: RowQuery | None = None, **changes: object) -> str:
        base = f"/runs/{quote(key)}"
        return (query or RowQuery()).url(base, **changes) + ("#rows" if changes else "")

    def row(self, key: str, position: int, query: RowQuery | None = None) -> str:
        """A row page; with ``query``, the rows list it was opened from (its filters, sort
        and page), which the page's back, previous and next links follow."""
        base = f"/runs/{quote(key)}/rows/{position}"
        return query.url(base) if query is not None else base

    def file(self, key: str, relative: str) -> str | None:
        return f"/runs/{quote(key)}/files/{quote(relative)}"

    def find(self, key: str, row_id: str, sample: int) -> str:
        return f"/runs/{quote(key)}/find?{urlencode({'row': row_id, 'sample': sample})}"


LINKS = ServerLinks()


@dataclass
class RunListLine:
    key: str
    name: str
    path: str
    state: str
    backend: str
    dataset: str
    started: str
    expected: int | None
    summary: Any
    duration: str


class _SavedSummary:
    """The fields the runs list shows, from a finished run's summary JSON."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.total = int(data.get("total") or 0)
        self.by_status = dict(data.get("by_status") or {})
        self.mean_reward_all = (data.get("reward") or {}).get("mean_all")
        self.pass_rate = (data.get("pass") or {}).get("rate")
        self.graded = int(data.get("graded") or 0)


class Viewer:
    """The state behind the app: the catalog of runs and one :class:`RunView` per run."""

    def __init__(self, catalog: Catalog, cache: Path | None) -> None:
        self.catalog = catalog
        self.cache = cache
        self.views: dict[str, RunView] = {}
        self._views_lock = threading.Lock()
        self._indexing: set[str] = set()
        self._sync_views()

    def _sync_views(self) -> None:
        with self._views_lock:
            for key, entry in self.catalog.runs.items():
                if key not in self.views:
                    self.views[key] = RunView(entry, self.cache)

    def rescan(self) -> None:
        self.catalog.rescan()
        self._sync_views()

    def start_indexing(self, keys: Iterable[str] | None = None) -> None:
        """Build the indexes of ``keys`` (all runs by default) in one background thread."""
        todo = [k for k in (keys if keys is not None else list(self.views)) if k in self.views]

        def work() -> None:
            for key in todo:
                self.ensure_index(key)

        threading.Thread(target=work, name="osmo-run-view-index", daemon=True).start()

    def ensure_index(self, key: str) -> None:
        view = self.views[key]
        with view.lock:
            view.refresh()

    def wait_ready(self, view: RunView, timeout: float = INDEX_WAIT_SEC) -> bool:
        """Whether ``view`` has an index, waiting up to ``timeout`` for a first build."""
        if view.ready.is_set():
            return True
        with self._views_lock:
            start = view.entry.key not in self._indexing
            self._indexing.add(view.entry.key)
        if start:
            self.start_indexing([view.entry.key])
        return view.ready.wait(timeout)

    def run_lines(self) -> list[RunListLine]:
        out = []
        for key, view in list(self.views.items()):
            entry = view.entry
            summary: Any = None
            if view.ready.is_set():
                with view.lock:
                    view.refresh()
                    summary = view.summary()
            else:
                summary = _saved_summary(entry)
                if summary is None and self.wait_ready(view, 0.2):  # a small run: at once
                    with view.lock:
                        summary = view.summary()
            started, ended = entry.started, entry.ended()
            duration = (
                fmt_seconds(max((ended - started).total_seconds(), 0.0))
                if started and ended
                else "-"
            )
            out.append(
                RunListLine(
                    key=key,
                    name=entry.name,
                    path=str(entry.paths.results),
                    state=entry.state(),
                    backend=entry.backend,
                    dataset=entry.dataset,
                    started=_when(started),
                    expected=entry.expected,
                    summary=summary,
                    duration=duration,
                )
            )
        return out


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment else "-"


def _saved_summary(entry: RunEntry) -> _SavedSummary | None:
    if entry.state() != "finished":
        return None
    try:
        data = json.loads(entry.paths.summary.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return _SavedSummary(data) if isinstance(data, dict) else None


def _state_text(state: dict[str, Any]) -> str:
    """``state`` as the one JSON text both a page (``data-shown-state`` of its live region)
    and its poll carry: the page script refreshes the live parts while the two differ, so
    a page catches up however late a poll is answered or a refresh fails."""
    return json.dumps(state, sort_keys=True, separators=(",", ":"))


def _state_response(text: str) -> Response:
    return Response(text, media_type="application/json")


def _run_state(view: RunView) -> str:
    """What a run page shows that changes as the run is written (call with the run's lock
    held when its index is ready)."""
    index = view.index
    return _state_text(
        {
            "count": index.count,
            "pending": index.pending,
            "bad": index.bad_count,
            "generation": index.generation,
            "state": view.entry.state(),
            "ready": view.ready.is_set(),
        }
    )


def _page(template: str, code: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(render(template, **context), status_code=code)


def _not_found(message: str) -> HTMLResponse:
    return _page("error.html", 404, status="Not found", message=message)


class SecurityHeaders:
    """Adds the Content-Security-Policy (and friends) to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_file = "/files/" in scope.get("path", "")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = FILE_POLICY if is_file else PAGE_POLICY
                headers["X-Content-Type-Options"] = "nosniff"
                headers["Referrer-Policy"] = "no-referrer"
                headers["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, with_headers)


def allowed_hosts(host: str, port: int) -> list[str]:
    """Host header values the app answers: loopback names, and ``host`` when it is another
    address (``*`` for a wildcard bind, where no single name can be known)."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    if address is not None and address.is_unspecified:
        return ["*"]
    names = ["127.0.0.1", "localhost", "::1", "[::1]", host]
    return sorted(set(names))


class _Handlers:
    """The request handlers of the viewer's pages, over one viewer's runs."""

    def __init__(self, viewer: Viewer) -> None:
        self.viewer = viewer

    def runs(self, request: Request) -> Response:
        viewer = self.viewer
        viewer.rescan()
        lines = viewer.run_lines()
        return _page(
            "runs.html",
            runs=lines,
            roots=[str(r) for r in viewer.catalog.roots],
            any_live=any(line.state == "live" for line in lines),
            shown_state=self._runs_state(),
        )

    def all_state(self, request: Request) -> Response:
        self.viewer.rescan()
        return _state_response(self._runs_state())

    def _runs_state(self) -> str:
        """What the runs list shows that changes as runs are written (see :func:`_state_text`):
        each indexed run's index is brought up to date first (a poll that read the index as
        the list left it saw no change while a run wrote, so the list froze until it
        finished). A run not indexed yet is not indexed here: the list shows its saved
        summary, and indexing a large finished run on every poll would stall the list."""
        state: dict[str, Any] = {}
        for key, view in list(self.viewer.views.items()):
            if view.ready.is_set():
                with view.lock:
                    view.refresh()
                    count = view.index.count
            else:
                count = view.index.count
            entry = view.entry
            state[key] = {"count": count, "state": entry.state(), "started": _when(entry.started)}
        return _state_text(state)

    def get_view(self, request: Request) -> RunView | None:
        return self.viewer.views.get(request.path_params["key"])

    def run_page(self, request: Request) -> Response:
        viewer = self.viewer
        view = self.get_view(request)
        if view is None:
            return _not_found(f"no run {request.path_params['key']!r} here")
        if not viewer.wait_ready(view):
            return _page(
                "indexing.html",
                entry=view.entry,
                done=view.index.progress,
                size=view.index.file_size or _size(view.entry.paths.results),
            )
        query_error = None
        try:
            query = RowQuery.parse(request.query_params)
        except QueryError as exc:
            query, query_error = RowQuery(), str(exc)
        with view.lock:
            view.refresh()
            overview = view.overview(LINKS)
            page, lines = view.page(query)
            count = view.index.count
            shown_state = _run_state(view)
        context: dict[str, Any] = {
            "o": overview,
            "key": view.entry.key,
            "query": query,
            "page": page,
            "lines": lines,
            "count": count,
            "links": LINKS,
            "query_error": query_error,
            "comparable": viewer.catalog.comparable(view.entry),
            "shown_state": shown_state,
        }
        if request.query_params.get("fragment") == "1":
            return _page("_fragment.html", **context)
        return _page("run.html", 400 if query_error else 200, **context)

    def run_state(self, request: Request) -> Response:
        view = self.get_view(request)
        if view is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        if view.ready.is_set():
            with view.lock:
                view.refresh()
                return _state_response(_run_state(view))
        return _state_response(_run_state(view))

    def row_page(self, request: Request) -> Response:
        viewer = self.viewer
        view = self.get_view(request)
        if view is None:
            return _not_found(f"no run {request.path_params['key']!r} here")
        if not viewer.wait_ready(view):
            return RedirectResponse(f"/runs/{quote(view.entry.key)}", status_code=303)
        position = request.path_params["position"]
        try:
            query = RowQuery.parse(request.query_params)
        except QueryError:
            query = RowQuery()  # a hand-edited list context: the whole run's order
        with view.lock:
            view.refresh()
            detail = view.detail(position)
            near = view.neighbors(position, query)
        if detail is None:
            return _not_found(f"run {view.entry.name} has no row at position {position}")
        return _page(
            "row.html",
            d=detail,
            entry=view.entry,
            key=view.entry.key,
            near=near,
            query=query,
            links=LINKS,
        )

    def find_row(self, request: Request) -> Response:
        viewer = self.viewer
        view = self.get_view(request)
        if view is None:
            return _not_found(f"no run {request.path_params['key']!r} here")
        row_id = request.query_params.get("row", "")
        sample_text = request.query_params.get("sample", "0")
        sample = int(sample_text) if sample_text.isdigit() else 0
        viewer.wait_ready(view)
        with view.lock:
            view.refresh()
            position = view.find(row_id, sample) if row_id else None
            if position is None and sample:
                position = view.find(f"{row_id}~{sample}", 0)
        if position is None:
            return _not_found(f"run {view.entry.name} has no row {row_id!r} (sample {sample})")
        return RedirectResponse(LINKS.row(view.entry.key, position), status_code=303)

    def run_file(self, request: Request) -> Response:
        view = self.get_view(request)
        if view is None:
            return _not_found("no such file")
        with view.lock:
            view.refresh()
            target = view.served_file(request.path_params["path"])
        if target is None:
            return _not_found("no such file among the files of this run")
        try:
            with open(target, "rb") as handle:
                kind = sniff(handle.read(512))
        except OSError:
            return _not_found("no such file in this run directory")
        if kind == "text":
            return FileResponse(target, media_type="text/plain; charset=utf-8")
        if kind.startswith("image/"):
            return FileResponse(target, media_type=kind)
        return FileResponse(target, media_type="application/octet-stream", filename=target.name)

    def _not_comparable(self, a: RunEntry, b: RunEntry) -> str | None:
        """Why runs ``a`` and ``b`` cannot be compared row by row, or ``None``."""
        for entry in (a, b):
            view = self.viewer.views.get(entry.key)
            bad = _first_bad_record(view) if view is not None else None
            if bad is not None:
                return (
                    f"{entry.name}: line {bad.line} of {entry.paths.results.name} is not a "
                    f"record ({bad.reason}); a comparison reads every line of both runs: "
                    "fix or remove that line"
                )
        return None

    def compare_page(self, request: Request) -> Response:
        viewer = self.viewer
        viewer.rescan()
        a_key, b_key = request.query_params.get("a", ""), request.query_params.get("b", "")
        runs_list = list(viewer.catalog.runs.values())
        context: dict[str, Any] = {"runs": runs_list, "c": None, "problem": None, "links": LINKS}
        if not a_key and not b_key:
            if len(runs_list) < 2:
                context["problem"] = "comparing needs two runs: give osmo-run view a folder of runs"
            return _page("compare.html", **context)
        a, b = viewer.catalog.get(a_key), viewer.catalog.get(b_key)
        if a is None or b is None:
            context["problem"] = f"no run {(b_key if a else a_key)!r} here"
            return _page("compare.html", 404, **context)
        if a.key == b.key:
            context["problem"] = "pick two different runs"
            return _page("compare.html", 400, **context)
        if b not in viewer.catalog.comparable(a):
            context["problem"] = (
                f"{a.name} and {b.name} ran different datasets ({a.dataset}, {b.dataset}): "
                "a row-by-row comparison needs runs of the same dataset"
            )
            return _page("compare.html", 400, **context)
        problem = self._not_comparable(a, b)
        if problem is not None:
            context["problem"] = problem
            return _page("compare.html", 400, **context)
        context["c"] = compare_runs(a, b, LINKS)
        return _page("compare.html", **context)

    def compare_row(self, request: Request) -> Response:
        """One row of two runs side by side: its result, why, and transcript in each."""
        viewer = self.viewer
        a = viewer.catalog.get(request.query_params.get("a", ""))
        b = viewer.catalog.get(request.query_params.get("b", ""))
        row_id = request.query_params.get("row", "")
        sample_text = request.query_params.get("sample", "0")
        sample = int(sample_text) if sample_text.isdigit() else 0
        if a is None or b is None or not row_id:
            return _not_found("give two runs of this viewer (a, b) and a row id (row)")
        sides = []
        for entry in (a, b):
            view = viewer.views[entry.key]
            viewer.wait_ready(view)
            with view.lock:
                view.refresh()
                position = view.find(row_id, sample)
                detail = view.detail(position) if position is not None else None
            sides.append((entry, detail))
        return _page("compare_row.html", sides=sides, row_id=row_id, sample=sample, links=LINKS)


def _first_bad_record(view: RunView) -> BadLine | None:
    """The first line of ``view``'s run that is JSON but not a record (``osmo-run report``'s
    reader, which the comparison uses, would take some of those as records)."""
    with view.lock:
        view.refresh()
        return next((b for b in view.index.bad if not b.reason.startswith("not JSON")), None)


def create_app(viewer: Viewer, trusted_hosts: list[str] | None = None) -> Starlette:
    """The ASGI app over ``viewer``'s runs."""
    static = Path(__file__).resolve().parent / "static"
    pages = _Handlers(viewer)
    routes = [
        Route("/", pages.runs),
        Route("/state", pages.all_state),
        Route("/compare", pages.compare_page),
        Route("/compare/row", pages.compare_row),
        Route("/runs/{key}", pages.run_page),
        Route("/runs/{key}/state", pages.run_state),
        Route("/runs/{key}/rows/{position:int}", pages.row_page),
        Route("/runs/{key}/find", pages.find_row),
        Route("/runs/{key}/files/{path:path}", pages.run_file),
        Mount("/static", StaticFiles(directory=static), name="static"),
    ]

    async def on_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        message = "no such page" if status == 404 else f"{type(exc).__name__}: {exc}"
        return _page("error.html", status, status=status, message=message)

    return Starlette(
        routes=routes,
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=trusted_hosts or ["*"]),
            Middleware(SecurityHeaders),
        ],
        exception_handlers={404: on_error, 405: on_error},
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: a free port); :class:`InputError` when the
    address cannot be used."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise InputError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
            "pass another --port (0 picks a free one)"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(app: Starlette, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until Ctrl-C or SIGTERM."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
