"""How many calls a run has in flight to each model endpoint: adaptive (AIMD), or fixed.

An endpoint that answers HTTP 429 above its own limit turns a run's concurrency into a storm
of retries. :class:`EndpointLimit` keeps the calls in flight to one endpoint under a limit
that follows what the endpoint accepts:

- it starts at :data:`INITIAL_LIMIT` (or the run's concurrency when that is lower) and
  grows by one per accepted call (slow start: it doubles every round of calls) until the
  first 429, which halves it. A call is accepted when it is answered, or once it has been
  in flight :data:`ACCEPTED_AFTER_SEC` without a 429: an endpoint over its limit says so at
  once, so a slow endpoint's limit doubles every 0.1 s instead of every answer;
- a later 429, or a 503 that carries ``Retry-After``, multiplies it by
  :data:`DECREASE_FACTOR`, once per round: the answers of calls sent before that decrease
  do not decrease it again, and a 429 opens no slot for the next call (the endpoint is
  still full: only an answer makes room);
- between 429s it grows additively, by one per round of calls (``1 / limit`` per answer)
  up to where the last 429 came, and past that by one every :data:`PROBE_ROUNDS` rounds;
- it never exceeds the run's concurrency (``ceiling``) and never drops below one.

A fixed limit (``llm.max_concurrency: N``) never moves. Calls beyond the limit wait for a
slot, in order; the waiting counts against the calling rollout's deadline (it keeps
running). :class:`ModelLimits` holds one limit per endpoint (scheme and host:port) for a
run. Use from one event loop. Stdlib only.
"""

from __future__ import annotations

import asyncio
import collections
import enum
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

INITIAL_LIMIT = 8
"""Where an adaptive limit starts (slow start doubles it every round of calls: 1,000 is
seven rounds away when the endpoint never says 429)."""

ACCEPTED_AFTER_SEC = 0.1
"""In slow start, a call in flight this long without a 429 counts as accepted, as an answer
would. An endpoint over its limit answers 429 within a round trip, long before a model
answers, so a limit growing only on answers would take seven calls' time (7 s at 1 s a
call) to reach 1,000; growing on this clock it takes 0.7 s. The price: an endpoint that
takes ``L`` seconds to say 429 can be sent up to ``2 ** (L / ACCEPTED_AFTER_SEC)`` times
what it admits before its first 429 halves the limit (twice at most when ``L`` <= 0.1 s)."""

SLOW_START_EXIT_FACTOR = 0.5
"""What the first 429 multiplies the limit by: slow start doubled it in the last round, so
what the endpoint admits lies between half of it and all of it."""

DECREASE_FACTOR = 0.75
"""What a later 429 multiplies the limit by. A milder cut than TCP's 0.5: the limit then
swings between 75 % and 100 % of what the endpoint admits instead of 50 % and 100 %, so
the run keeps most of the endpoint's throughput."""

PROBE_ROUNDS = 8
"""Past the limit at which the endpoint last said 429, the limit grows by one every this
many rounds instead of every round: each probe past it costs a 429, and at a small limit
(4 calls at once) one a round would make every fourth call a 429."""


class Outcome(enum.Enum):
    """What one call's try told the limit."""

    ANSWERED = "answered"
    """Any answer that is not a throttle: the endpoint had room for the call."""
    THROTTLED = "throttled"
    """HTTP 429, or a 503 with ``Retry-After``: the endpoint is over its limit."""
    NEUTRAL = "neutral"
    """No answer, another 5xx, or a call abandoned: says nothing about the limit."""
    NOT_SENT = "not sent"
    """The slot was given back before the try was sent (the budget refused it)."""


def outcome_of(status: int | None, has_retry_after: bool) -> Outcome:
    """The :class:`Outcome` of an answer with HTTP ``status`` (``None``: none came)."""
    if status is None:
        return Outcome.NEUTRAL
    if status == 429 or (status == 503 and has_retry_after):
        return Outcome.THROTTLED
    if 500 <= status <= 599:
        return Outcome.NEUTRAL
    return Outcome.ANSWERED


@dataclass
class LimitStats:
    """What a run records of one endpoint's limit (the summary's ``model_limits``)."""

    endpoint: str
    mode: str
    """``adaptive`` or ``fixed``."""
    ceiling: int
    initial: int
    min: int
    """The lowest limit since the first 429 (before it: ``initial``)."""
    max: int
    final: int
    throttled: int
    """Answers that were 429 (or 503 with ``Retry-After``)."""
    calls: int
    """Tries sent to the endpoint, throttled ones included."""
    waited: int
    """Tries that waited for a slot."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "mode": self.mode,
            "ceiling": self.ceiling,
            "initial": self.initial,
            "min": self.min,
            "max": self.max,
            "final": self.final,
            "throttled": self.throttled,
            "calls": self.calls,
            "waited": self.waited,
        }


IN_FLIGHT, ACCEPTED, ENDED = 0, 1, 2
"""A :class:`Grant`'s state: its try is in flight, in flight and accepted on the clock
(slow start), or ended."""


class Grant:
    """One slot given to one try: the round it was granted in and, in slow start, when."""

    __slots__ = ("round", "sent_at", "state")

    def __init__(self, granted_round: int, sent_at: float) -> None:
        self.round = granted_round
        self.sent_at = sent_at
        self.state = IN_FLIGHT


class EndpointLimit:
    """The calls in flight to one endpoint, under an adaptive or a ``fixed`` limit (see the
    module docstring). ``ceiling`` is the run's concurrency.

    ``async with limit.slot() as ticket: ...`` sends one try; :meth:`Ticket.done` tells the
    limit how the try ended (a ticket left without it counts as :attr:`Outcome.NEUTRAL`).
    """

    def __init__(self, endpoint: str, ceiling: int, fixed: int | None = None) -> None:
        self.endpoint = endpoint
        self.ceiling = max(1, ceiling)
        self.fixed = None if fixed is None else max(1, fixed)
        start = self.fixed if self.fixed is not None else min(INITIAL_LIMIT, self.ceiling)
        self._limit = float(start)
        self.initial = start
        self.min = start
        self.max = start
        self.in_flight = 0
        self.throttled = 0
        self.calls = 0
        self.waited = 0
        self._slow_start = self.fixed is None
        self._throttled_at = float(self.ceiling)
        """The limit when the endpoint last said 429."""
        self._round = 0
        """Bumped by each decrease: a throttle of a call sent before it is old news."""
        self._waiters: collections.deque[asyncio.Future[Grant]] = collections.deque()
        self._unproven: collections.deque[Grant] = collections.deque()
        """Slow start's tries in flight, oldest first, not yet counted as accepted."""
        self._accepted_in_flight = 0
        """Slow start's tries in flight accepted on the clock."""
        self._clock: asyncio.TimerHandle | None = None
        """The timer counting the oldest unproven try as accepted (slow start only)."""

    @property
    def limit(self) -> int:
        """The calls allowed in flight now."""
        return max(1, int(self._limit))

    @property
    def full(self) -> bool:
        """Whether a call made now would wait for a slot."""
        return self.in_flight >= self.limit or bool(self._waiters)

    @property
    def waiting(self) -> int:
        """Tries waiting for a slot."""
        return len(self._waiters)  # a cancelled waiter removes itself

    def slot(self) -> Slot:
        """An async context manager holding one slot for one try (see the class)."""
        return Slot(self)

    async def acquire(self) -> Grant:
        """Wait for a slot (in order of arrival); return its :class:`Grant`. Cancellation
        while waiting gives nothing up: no slot was taken."""
        if self.in_flight < self.limit and not self._waiters:
            self.in_flight += 1
            return self._grant()
        waiter: asyncio.Future[Grant] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.waited += 1
        self._arm_clock()
        try:
            grant = await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted as it was cancelled
                self._end(waiter.result())
                self.in_flight -= 1
                self._wake()
            else:
                self._drop(waiter)
            raise
        return grant  # granted in its round, not the one it resumed in

    def _grant(self) -> Grant:
        if not self._slow_start or self._limit >= self.ceiling:
            # at the ceiling the clock has nothing left to grow (slow start only grows the
            # limit; a 429 ends it): an endpoint that never says 429 would otherwise keep
            # every call it was granted
            return Grant(self._round, 0.0)
        while self._unproven and self._unproven[0].state != IN_FLIGHT:
            self._unproven.popleft()  # ended: without waiters no clock looks at them
        grant = Grant(self._round, asyncio.get_running_loop().time())
        self._unproven.append(grant)
        return grant

    def _end(self, grant: Grant) -> None:
        """Mark ``grant``'s try ended. Its answer still grows the limit in slow start when
        the clock accepted it: the clock's rule is a level (twice the calls accepted and
        still in flight), which calls answered soon after acceptance never raise; without
        their answers a 100 ms endpoint's limit stalled at 32."""
        if grant.state == ACCEPTED and self._slow_start:
            self._accepted_in_flight -= 1
        grant.state = ENDED

    def _arm_clock(self) -> None:
        """In slow start, while calls wait, count the oldest try in flight as accepted
        once it has been in flight :data:`ACCEPTED_AFTER_SEC` (one timer per endpoint)."""
        if self._clock is not None or not self._slow_start or not self._waiters:
            return
        while self._unproven and self._unproven[0].state != IN_FLIGHT:
            self._unproven.popleft()
        if not self._unproven or self._limit >= self.ceiling:
            return
        loop = asyncio.get_running_loop()
        due = self._unproven[0].sent_at + ACCEPTED_AFTER_SEC
        self._clock = loop.call_at(due, self._clock_ticked)

    def _clock_ticked(self) -> None:
        self._clock = None
        if not self._slow_start:
            return
        now = asyncio.get_running_loop().time()
        while self._unproven and self._unproven[0].sent_at + ACCEPTED_AFTER_SEC <= now:
            grant = self._unproven.popleft()
            if grant.state == IN_FLIGHT:
                grant.state = ACCEPTED
                self._accepted_in_flight += 1
        if self._waiters:  # only a limit that holds calls back is tested by them
            # The endpoint holds this many calls without a 429: send twice as many.
            doubled = min(float(self.ceiling), 2.0 * self._accepted_in_flight)
            self._limit = max(self._limit, doubled)
            self.max = max(self.max, self.limit)
        self._wake()
        self._arm_clock()

    def release(self, grant: Grant, outcome: Outcome) -> None:
        """Give a slot back, telling the limit how its try ended."""
        self._end(grant)
        used = self.in_flight >= self.limit or bool(self._waiters)
        """Whether the limit held calls back: only then did the answer test it (rows that
        start slowly must not grow it past what was ever sent at once)."""
        self.in_flight -= 1
        if outcome is not Outcome.NOT_SENT:
            self.calls += 1
        if outcome is Outcome.THROTTLED:
            self.throttled += 1
            if self.fixed is None and grant.round == self._round:
                self._throttled_at = self._limit
                factor = SLOW_START_EXIT_FACTOR if self._slow_start else DECREASE_FACTOR
                self._limit = max(1.0, self._limit * factor)
                self._round += 1
                if self._slow_start:  # the lowest since the limit first backed off
                    self._end_slow_start()
                    self.min = self.limit
        elif outcome is Outcome.ANSWERED and self.fixed is None and used:
            if self._slow_start:
                step = 1.0
            elif self._limit + 1.0 < self._throttled_at:
                step = 1.0 / self._limit  # back to where the endpoint said 429: one a round
            else:
                step = 1.0 / (self._limit * PROBE_ROUNDS)  # past it: one per PROBE_ROUNDS
            self._limit = min(float(self.ceiling), self._limit + step)
        current = self.limit
        self.min = min(self.min, current)
        self.max = max(self.max, current)
        if outcome is not Outcome.THROTTLED or self.in_flight == 0:
            # A 429 comes back at once while the endpoint is still full: its slot given to
            # the next call would be answered 429 too. Room opens when a call is answered.
            self._wake()
        self._arm_clock()

    def _end_slow_start(self) -> None:
        self._slow_start = False
        self._unproven.clear()
        self._accepted_in_flight = 0  # ended grants no longer look at it
        if self._clock is not None:
            self._clock.cancel()
            self._clock = None

    def _drop(self, waiter: asyncio.Future[Grant]) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.limit:
            waiter = self._waiters.popleft()
            if waiter.done():  # cancelled while it waited
                continue
            self.in_flight += 1
            waiter.set_result(self._grant())

    def stats(self) -> LimitStats:
        return LimitStats(
            endpoint=self.endpoint,
            mode="adaptive" if self.fixed is None else "fixed",
            ceiling=self.ceiling if self.fixed is None else self.fixed,
            initial=self.initial,
            min=self.min,
            max=self.max,
            final=self.limit,
            throttled=self.throttled,
            calls=self.calls,
            waited=self.waited,
        )


class Slot:
    """One try's slot: entered, it waits for room; left, it gives the slot back with the
    outcome set by :meth:`done` (:attr:`Outcome.NEUTRAL` when none was: a try sent that
    ended without an answer)."""

    def __init__(self, limit: EndpointLimit) -> None:
        self._limit = limit
        self._grant: Grant | None = None
        self._outcome = Outcome.NEUTRAL

    def done(self, outcome: Outcome) -> None:
        self._outcome = outcome

    async def __aenter__(self) -> Slot:
        self._grant = await self._limit.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._grant is not None, "left a slot never entered"
        self._limit.release(self._grant, self._outcome)


def endpoint_name(url: str) -> str:
    """The endpoint a URL's calls are limited under: ``scheme://host:port``."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class ModelLimits:
    """One :class:`EndpointLimit` per endpoint of a run, made on its first call; adaptive
    under ``ceiling`` (the run's concurrency) unless :meth:`fix` set the endpoint's, or
    ``fixed_default`` is given for endpoints :meth:`fix` did not name (a server's rollouts
    bring endpoints of their own: the spec's ``llm.max_concurrency`` holds each)."""

    def __init__(self, ceiling: int, fixed_default: int | None = None) -> None:
        self.ceiling = max(1, ceiling)
        self._fixed: dict[str, int | None] = {}
        self._fixed_default = fixed_default
        self._limits: dict[str, EndpointLimit] = {}

    def fix(self, url: str, limit: int | None) -> None:
        """Hold the calls in flight to ``url``'s endpoint at ``limit`` (``llm.max_concurrency``);
        ``None`` keeps it adaptive whatever ``fixed_default`` says."""
        self._fixed[endpoint_name(url)] = limit

    def for_url(self, url: str) -> EndpointLimit:
        name = endpoint_name(url)
        limit = self._limits.get(name)
        if limit is None:
            fixed = self._fixed.get(name, self._fixed_default)
            limit = self._limits[name] = EndpointLimit(name, self.ceiling, fixed)
        return limit

    def all(self) -> list[EndpointLimit]:
        """Every endpoint called so far, in the order of their first calls."""
        return list(self._limits.values())

    def status(self) -> str | None:
        """The live display's words, e.g. ``model slots 37/200 · 12 waiting · 429s 12``
        (one part per endpoint; ``None`` before any call)."""
        parts = []
        for limit in list(self._limits.values()):  # read by the live display's thread too
            text = (
                f"model slots {limit.limit}/{limit.ceiling if limit.fixed is None else limit.fixed}"
            )
            if limit.fixed is not None:
                text += " fixed"
            if len(self._limits) > 1:
                text += f" ({urlsplit(limit.endpoint).netloc})"
            if limit.waiting:
                text += f" · {limit.waiting:,} waiting"
            text += f" · 429s {limit.throttled:,}"
            parts.append(text)
        return " · ".join(parts) if parts else None
