"""Polling leases: who may read a rollout's result, and until when it is wanted.

Admission issues a random token; only its SHA-256 is kept (in memory and in the results
file's ``lease_sha256``), so a restarted server can check a token it never stored. Tokens
are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets


def lease_digest(token: str) -> str:
    """The hex SHA-256 of ``token``: what is kept of it."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_lease() -> tuple[str, str]:
    """A fresh ``(token, digest)``: 256 random bits, URL-safe."""
    token = secrets.token_urlsafe(32)
    return token, lease_digest(token)


def lease_matches(digest: str, token: str) -> bool:
    """Whether ``token`` is the one ``digest`` was made from (constant time)."""
    return hmac.compare_digest(digest.encode("ascii"), lease_digest(token).encode("ascii"))


class Lease:
    """One rollout's lease: its digest and deadline (a ``time.monotonic()`` instant). While
    the rollout is unfinished, each result read renews the deadline; a lapsed lease ends
    the rollout (``lease_expired``)."""

    __slots__ = ("deadline", "digest", "timeout_sec")

    def __init__(self, digest: str, timeout_sec: float, now: float) -> None:
        self.digest = digest
        self.timeout_sec = timeout_sec
        self.deadline = now + timeout_sec

    def lapsed(self, now: float) -> bool:
        return now >= self.deadline

    def renew(self, now: float) -> bool:
        """Push the deadline to ``now + timeout``; ``False`` (and nothing renewed) when it
        had lapsed already."""
        if self.lapsed(now):
            return False
        self.deadline = now + self.timeout_sec
        return True
