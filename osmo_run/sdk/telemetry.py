"""Telemetry that JSON can hold: a rollout's metrics and info, made writable.

Metrics and info are what a rollout reports about itself; the reward and the conversation
are what it is for. A value that cannot be written must never cost a rollout its reward, so
instead of failing the row, values are converted or dropped, and the row says which in its
``warnings``:

* numbers that are not Python's own (numpy's ``float32``, ``int64``, ``bool_``; anything
  registered with :mod:`numbers`) become ``int`` or ``float``; numpy is never imported: its
  scalars are recognised by the module of their type and their ``item()`` method;
* a metric is a finite number: booleans count as 0 and 1; NaN, infinities and anything else
  are dropped;
* info holds JSON values: the same numbers are converted and non-finite ones dropped; other
  objects are left for the writer, which writes them as their ``repr``.

Stdlib only.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

_DROP = object()
"""A value with no place in the output."""

_EXACT_INT_BOUND = 2**1023
"""An ``int`` smaller than this in magnitude converts to a finite float (larger ones may
overflow: those take the careful path)."""


def _plain_number(value: object) -> object:
    """``value`` as a Python ``int``/``float``/``bool`` when it is a number of another
    kind (numpy's scalars, ``Fraction``), else ``value`` itself."""
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item()
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def _metric(value: object) -> float | object:
    """The metric ``value`` stands for, or ``_DROP``."""
    if type(value) is float:
        return value if math.isfinite(value) else _DROP
    if type(value) is not int:
        value = _plain_number(value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        try:
            return value if math.isfinite(float(value)) else _DROP
        except OverflowError:
            return _DROP
    if isinstance(value, float):
        return value if math.isfinite(value) else _DROP
    return _DROP


def _describe(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"


def metrics_fit(metrics: object) -> bool:
    """Whether ``metrics`` is what :func:`fit_metrics` makes of it already: a ``dict`` of
    ``str`` keys and finite ``float`` or ``int`` values (a quick check, no copy)."""
    if type(metrics) is not dict:
        return False
    for key, value in metrics.items():
        if type(key) is not str or not (
            (type(value) is float and value - value == 0.0)  # finite (nan, inf: nan)
            or (type(value) is int and -_EXACT_INT_BOUND < value < _EXACT_INT_BOUND)
        ):
            return False
    return True


def fit_metrics(metrics: object) -> tuple[dict[str, float], str | None]:
    """``metrics`` as a dict of finite numbers, and a warning naming what was dropped
    (``None`` when nothing was)."""
    if not isinstance(metrics, dict):
        return {}, f"metrics must be a dict of numbers; dropped {_describe(metrics)}"
    if metrics_fit(metrics):  # the common case, once per rollout
        return dict(metrics), None
    fitted: dict[str, float] = {}
    dropped: list[str] = []
    for key, value in metrics.items():
        metric = _metric(value)
        if metric is _DROP:
            dropped.append(f"{key!r} ({_describe(value)})")
        else:
            fitted[str(key)] = metric  # type: ignore[assignment]  # _metric gave a number
    if not dropped:
        return fitted, None
    return fitted, "metrics must be finite numbers; dropped " + ", ".join(dropped)


def _json_value(value: Any, path: str, dropped: list[str]) -> Any:
    if value is None or isinstance(value, str | bool) or type(value) is int:
        return value
    if type(value) is float:
        if math.isfinite(value):
            return value
        dropped.append(f"{path} ({value})")
        return _DROP
    if isinstance(value, dict):
        fitted = {}
        for key, item in value.items():
            fitted_item = _json_value(item, f"{path}[{key!r}]", dropped)
            if fitted_item is not _DROP:
                fitted[key] = fitted_item
        return fitted
    if isinstance(value, list | tuple):
        items = (_json_value(item, f"{path}[{i}]", dropped) for i, item in enumerate(value))
        return [item for item in items if item is not _DROP]
    plain = _plain_number(value)
    return value if plain is value else _json_value(plain, path, dropped)


def fit_info(info: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``info`` with foreign numbers converted and non-finite ones dropped, and a warning
    naming what was dropped (``None`` when nothing was)."""
    if not info:
        return info, None
    dropped: list[str] = []
    fitted = _json_value(info, "info", dropped)
    if not dropped:
        return fitted, None
    return fitted, "info must hold JSON values; dropped non-finite " + ", ".join(dropped)
