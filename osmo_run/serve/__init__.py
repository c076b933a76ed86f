"""``osmo-run serve``: rollouts for a trainer over osmosis-ai 0.3.8's rollout protocol.

- :mod:`~osmo_run.serve.protocol`: the wire (pydantic models of the bodies, the answers);
- :mod:`~osmo_run.serve.leases`, :mod:`~osmo_run.serve.admission`: polling leases, the
  bounded queue's ``Retry-After``;
- :mod:`~osmo_run.serve.rollouts`: the served rollouts (admission, the runner's queue,
  long-polls, cancels, expiry);
- :mod:`~osmo_run.serve.backend`: the backend and results writer a serving run wraps;
- :mod:`~osmo_run.serve.app`: the Starlette app; :mod:`~osmo_run.serve.session`: the run.
"""
