"""The garbage collector's settings while rows run.

A run keeps thousands of short-lived objects per second (requests, responses, records) and a
large, long-lived heap (imported modules, the dataset index, the summary's sketches). With
CPython's default thresholds (700, 10, 10) the collector runs every 700 allocations and walks
the whole heap every 70,000: measured on 20,000 rows waiting 100 ms on a model at
concurrency 1,000, a third of the run's CPU time (9.1 s of CPU against 6.0 s with these
settings, peak memory unchanged; bench/RESULTS.md, workload 7).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

ROLLOUT_THRESHOLDS = (50_000, 20, 100)
"""Young-generation collections every 50,000 allocations, full ones a hundred times rarer:
cyclic garbage (exception tracebacks, aiohttp's request objects) still goes within a few
seconds, and each collection is worth its cost."""


@contextlib.contextmanager
def tuned_for_rollouts() -> Iterator[None]:
    """Within this block, objects that exist on entry (the modules and the run's set-up) are
    left out of collections (``gc.freeze``) and collections run at
    :data:`ROLLOUT_THRESHOLDS`; on exit the previous thresholds are back and frozen objects
    are collectable again."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*ROLLOUT_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
