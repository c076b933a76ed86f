"""What the run page derives from a whole index (the summary, the reward histogram, the
duration percentiles), cached beside the index so a large run's page opens at once.

Computing it takes about a second per million rows; the cache file holds the result for
one exact state of the results file (its identity, the bytes indexed, the rollouts
counted, the pass threshold and samples per row) and is used only for that state.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from osmo_run.run.reporting.stats import MeanEstimate
from osmo_run.run.reporting.summary import RunSummary, UsageSummary
from osmo_run.view import charts
from osmo_run.view.index import RowIndex
from osmo_run.view.summary import run_summary

VERSION = 2


@dataclass
class Derived:
    summary: RunSummary
    reward_bins: list[charts.RewardBin]
    durations: list[tuple[str, float]]


def compute(index: RowIndex, threshold: float, samples: int, output: str) -> Derived:
    return Derived(
        run_summary(index, threshold, samples, output),
        charts.reward_bins(charts.graded_rewards(index)),
        charts.duration_quantiles(sorted(index.cols.seconds)),
    )


def _summary_from(data: dict[str, Any]) -> RunSummary:
    for key in ("graded_estimate", "all_estimate", "pass_estimate"):
        if data.get(key) is not None:
            data[key] = MeanEstimate(**data[key])
    for key in ("usage", "grader_usage"):
        if data.get(key) is not None:
            usage = data[key]
            for spread in ("prompt_per_rollout", "completion_per_rollout", "total_per_rollout"):
                usage[spread] = tuple(usage[spread])
            data[key] = UsageSummary(**usage)
    data["pass_at_k"] = {int(k): v for k, v in data["pass_at_k"].items()}
    return RunSummary(**data)


def _state(index: RowIndex, threshold: float, samples: int) -> list[Any]:
    return [VERSION, index.identity, index.indexed_size, index.count, threshold, samples]


def load(index: RowIndex, threshold: float, samples: int) -> Derived | None:
    """The cached result for the index's current state, or ``None``."""
    path = index.cache_file(".derived.json")
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data["state"] != json.loads(json.dumps(_state(index, threshold, samples))):
            return None
        return Derived(
            _summary_from(data["summary"]),
            [charts.RewardBin(**b) for b in data["reward_bins"]],
            [(str(name), float(value)) for name, value in data["durations"]],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(index: RowIndex, threshold: float, samples: int, derived: Derived) -> None:
    """Cache ``derived``; a cache that cannot be written is not an error."""
    path = index.cache_file(".derived.json")
    if path is None:
        return
    data = {
        "state": _state(index, threshold, samples),
        "summary": asdict(derived.summary),
        "reward_bins": [asdict(b) for b in derived.reward_bins],
        "durations": derived.durations,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(path)
    except (OSError, ValueError):
        return
