"""Percentiles in bounded memory: exact while the values are few, within a bucket after."""

from __future__ import annotations

import random

import pytest

from osmo_run.run.reporting.quantiles import BUCKET_RATIO, EXACT_LIMIT, QuantileSketch
from osmo_run.run.reporting.stats import percentile


def _sketch(values: list[float]) -> QuantileSketch:
    sketch = QuantileSketch()
    for value in values:
        sketch.add(value)
    return sketch


def test_few_values_give_the_exact_interpolated_percentiles() -> None:
    values = [random.Random(1).uniform(0, 10) for _ in range(EXACT_LIMIT)]
    sketch = _sketch(values)
    for q in (0.0, 0.5, 0.95, 1.0):
        assert sketch.quantile(q) == percentile(sorted(values), q)


@pytest.mark.parametrize("spread", [(1e-4, 1.0), (0.5, 600.0), (1.0, 200_000.0)])
def test_many_values_give_percentiles_within_a_bucket(spread: tuple[float, float]) -> None:
    rng = random.Random(7)
    low, high = spread
    values = [rng.uniform(low, high) for _ in range(50_000)]
    sketch = _sketch(values)
    ordered = sorted(values)
    for q in (0.05, 0.5, 0.95, 0.99):
        exact = percentile(ordered, q)
        assert exact is not None
        estimate = sketch.quantile(q)
        assert estimate is not None
        assert abs(estimate - exact) / exact <= BUCKET_RATIO - 1
    assert sketch.max == max(values)
    assert sketch.count == len(values)
    assert sketch.total == pytest.approx(sum(values))


def test_zeros_and_an_empty_sketch() -> None:
    assert QuantileSketch().quantile(0.5) is None
    sketch = _sketch([0.0] * (EXACT_LIMIT + 10) + [5.0])
    assert sketch.quantile(0.5) == 0.0
    assert sketch.quantile(1.0) == 5.0
