"""Every grace period and margin around a rollout's deadline, in one place.

A row's deadline (``agent_timeout_sec`` for the workflow, ``grader_timeout_sec`` for the
grader) is enforced in layers. The innermost layer reports the timeout with the precise
message; each outer layer waits a little longer than the one inside it, so it acts only
when the inner one could not (code that blocks the event loop, a process that hangs):

1. **The event loop running the phase** (:mod:`osmo_run.sdk.rollout`, in-process and inside
   every sandbox): at the deadline the phase's task is cancelled; a coroutine that ignores
   cancellation is abandoned after :data:`CANCEL_GRACE_SEC`. A deadline of zero or less has
   passed before the phase starts: the phase is a timeout without running. Rows sharing
   one loop (``osmo-run local``) do not pay for each other's synchronous code: time the loop
   spent stalled by another row's code (:mod:`osmo_run.sdk.stalls`; a stall is the loop
   not answering for more than :data:`STALL_THRESHOLD_SEC`) is added to a row's deadline,
   while a row's own stalls count against it.
2. **A child process** (``--isolation process``): the deadline counts from the moment the
   child's phase starts (its interpreter and the user's code loaded, which the child
   signals), and the parent kills a child that has not returned
   :data:`PROCESS_KILL_MARGIN_SEC` after the deadline: time for a child that met its
   deadline to write its result, no more. A child that never starts its phase is killed
   after :data:`PROCESS_START_LIMIT_SEC`.
3. **A Harbor trial**: coreutils ``timeout`` kills the runner inside the container
   :data:`SANDBOX_KILL_MARGIN_SEC` after the deadline (``SIGKILL`` after a further
   :data:`SANDBOX_KILL_AFTER_SEC`); Harbor's own agent and verifier timeouts are set
   :data:`HARBOR_MARGIN_SEC` after the deadline, so osmo-run, not Harbor, reports it.
4. **An interrupted run** (Ctrl-C): rows in flight get :data:`INTERRUPT_GRACE_SEC`, or the
   backend's ``cancel_grace_sec`` when longer (:data:`HARBOR_INTERRUPT_GRACE_SEC` for
   trials, whose containers take seconds to stop), before they are recorded as abandoned.
5. **A ``--smoke`` run** caps every deadline at :data:`SMOKE_DEADLINE_SEC`, so a CI step
   finishes in bounded time.
"""

from __future__ import annotations

CANCEL_GRACE_SEC = 1.0
"""How long a timed-out coroutine may take to honour cancellation before it is abandoned."""

PROCESS_KILL_MARGIN_SEC = 0.5
"""How long after its deadline a child process that has not returned is killed: enough for
a child that stopped at its deadline to write its result file and exit."""

PROCESS_START_LIMIT_SEC = 60.0
"""How long a child process may take to load (interpreter, SDK, the user's code) before its
phase starts; not part of the row's deadline, as imports are not for rows in one process."""

STALL_CHECK_INTERVAL_SEC = 0.05
"""How often the event loop's heartbeat runs (:mod:`osmo_run.sdk.stalls`)."""

STALL_THRESHOLD_SEC = 0.1
"""How late the heartbeat must run before the loop counts as stalled: shorter pauses (a busy
loop, a garbage collection) extend no deadline and blame no row."""

STALL_SAMPLE_SEC = 0.02
"""How often the watchdog thread looks for a stall and the task holding the loop."""

SANDBOX_KILL_MARGIN_SEC = 15.0
"""How long after its deadline the sandbox runner in a trial may live before ``timeout``
stops it; the runner enforces the exact deadline itself and writes a timeout result."""

SANDBOX_KILL_AFTER_SEC = 5
"""``timeout -k``: how long after its TERM a runner that did not stop gets SIGKILL."""

HARBOR_MARGIN_SEC = 2 * SANDBOX_KILL_MARGIN_SEC
"""How long after the row's deadline Harbor's own agent and verifier timeouts fire."""

INTERRUPT_GRACE_SEC = 5.0
"""How long rows in flight may take to stop after an interrupt before they are abandoned."""

HARBOR_INTERRUPT_GRACE_SEC = 60.0
"""The same for Harbor trials: stopping a trial's containers takes seconds each."""

SMOKE_DEADLINE_SEC = 60.0
"""The longest workflow or grader deadline in a ``--smoke`` run."""


def with_margin(deadline_sec: float | None, margin_sec: float) -> float | None:
    """``deadline_sec + margin_sec``, or ``None`` (no deadline) when ``deadline_sec`` is."""
    return None if deadline_sec is None else deadline_sec + margin_sec
