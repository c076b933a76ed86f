"""The duplicate-id check's memory: a table of fingerprints that never misses a value it was
given."""

from __future__ import annotations

import random

from osmo_run.run.reading.seen import MAX_LOAD, SeenHashes


def test_every_value_added_is_reported_seen_and_new_values_rarely_are() -> None:
    rng = random.Random(3)
    values = [rng.getrandbits(64) for _ in range(300_000)]
    seen = SeenHashes(expected=100_000)  # fewer than come: a second and third table take them
    false_positives = sum(seen.add(value) for value in values)
    assert all(value in seen for value in values)
    assert all(seen.add(value) for value in values[:1000])  # a repeat is always caught
    assert false_positives <= 3
    fresh = [rng.getrandbits(64) for _ in range(100_000)]
    assert sum(value in seen for value in fresh) <= 3


def test_memory_is_a_few_bytes_a_value() -> None:
    seen = SeenHashes(expected=500_000)
    for value in range(500_000):
        seen.add(hash(f"row-{value}"))
    assert seen.nbytes <= 4 / MAX_LOAD * 500_000 + 8
