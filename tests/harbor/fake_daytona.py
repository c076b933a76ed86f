"""A local stand-in for Daytona's cloud API, for the tests that cannot reach the cloud.

Daytona's API is a paid service this machine cannot reach, so the tests point the real
``daytona`` SDK (and Harbor's Daytona environment, which drives it) at this HTTP server on
127.0.0.1 through ``DAYTONA_API_URL``. It answers the few endpoints the SDK calls first
(``GET /sandbox`` to list sandboxes, ``POST /sandbox`` to create one) the way the cloud
answers when things go wrong: a rejected key (401/403 with Daytona's JSON error body), a
rate limit or exhausted quota (429), a server error (5xx with an HTML page, as a proxy in
front of the API sends), or slowly. It never creates a sandbox: everything past the
boundary (a sandbox that runs a trial) is out of reach here.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

BAD_GATEWAY_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>502 Bad Gateway</title>
  <style>body { font-family: sans-serif; margin: 4em; } h1 { color: #b00; }</style>
</head>
<body>
  <h1>Bad Gateway</h1>
  <p>The proxy in front of the sandbox API received an invalid response upstream.</p>
  <p>Request id: 7f3c9a1e-0d2b-4c55-9a8e-1b2f3c4d5e6f</p>
  <hr><address>edge-proxy</address>
</body>
</html>
"""


@dataclass(frozen=True)
class Answer:
    """What the fake answers one request with."""

    status: int
    body: str
    content_type: str = "application/json"
    delay_sec: float = 0.0


def daytona_error(status: int, message: str, code: str | None = None) -> Answer:
    """An error in Daytona's own JSON envelope (what its API sends for 4xx)."""
    body = {"statusCode": status, "message": message, "error": code or "Error"}
    return Answer(status, json.dumps(body))


EMPTY_LIST = Answer(200, json.dumps({"items": [], "nextCursor": None}))
REJECTED_KEY = daytona_error(401, "Invalid API key", "Unauthorized")
FORBIDDEN_KEY = daytona_error(403, "Forbidden resource: missing write:sandboxes", "Forbidden")
RATE_LIMITED = daytona_error(429, "ThrottlerException: Too Many Requests", "Too Many Requests")
QUOTA_EXCEEDED = daytona_error(403, "Total CPU quota exceeded. Maximum allowed: 10", "Forbidden")
SERVER_ERROR_PAGE = Answer(502, BAD_GATEWAY_PAGE, "text/html")


@dataclass
class FakeDaytona:
    """The running fake: ``url`` is what ``DAYTONA_API_URL`` names; ``answers`` maps
    ``"METHOD /path"`` to an :class:`Answer` (a missing key is the healthy answer: an empty
    list for ``GET /sandbox``, 404 otherwise); ``requests`` records every request as
    ``(method, path, Authorization header)``."""

    url: str = ""
    answers: dict[str, Answer] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)

    def answer_everything(self, answer: Answer) -> None:
        """Answer both endpoints the SDK calls first with ``answer``."""
        self.answers["GET /sandbox"] = answer
        self.answers["POST /sandbox"] = answer

    def calls(self, method: str, path: str = "/sandbox") -> int:
        """How many ``method path`` requests arrived (the query string ignored)."""
        return sum(1 for m, p, _ in self.requests if m == method and p == path)

    def env(self, api_key: str = "fake-daytona-key") -> dict[str, str]:
        """The variables that point the SDK at this fake with ``api_key``."""
        return {"DAYTONA_API_URL": self.url, "DAYTONA_API_KEY": api_key}


def _handler(fake: FakeDaytona) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            path = self.path.partition("?")[0].removeprefix("/api").rstrip("/") or "/"
            fake.requests.append((self.command, path, self.headers.get("Authorization")))
            answer = fake.answers.get(f"{self.command} {path}")
            if answer is None:
                answer = (
                    EMPTY_LIST
                    if (self.command, path) == ("GET", "/sandbox")
                    else daytona_error(404, f"Cannot {self.command} {path}", "Not Found")
                )
            if answer.delay_sec:
                time.sleep(answer.delay_sec)
            payload = answer.body.encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            try:
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                pass

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet: a client that gives up on a slow answer resets its connection."""


@contextmanager
def fake_daytona() -> Iterator[FakeDaytona]:
    """Serve a :class:`FakeDaytona` on a free port of 127.0.0.1 while the block runs."""
    fake = FakeDaytona()
    server = _Server(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/api"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
