"""``GET /metrics``: the server's counters in Prometheus's text exposition format (0.0.4).

Written by hand (a few counters, gauges and two histograms) rather than with
``prometheus_client``, which would be one more dependency for a page of text. Label values
are osmo-run's own vocabulary (routes, statuses, categories): never an id or a message.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Any

from osmo_run.sdk.types import ExecutionResult

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Histogram:
    """Cumulative buckets of observed seconds, their sum and count."""

    def __init__(self, buckets: tuple[float, ...] = SECONDS_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        index = bisect.bisect_left(self.buckets, seconds)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += seconds
        self.count += 1

    def lines(self, name: str) -> list[str]:
        lines = []
        running = 0
        for bound, count in zip(self.buckets, self.counts, strict=True):
            running += count
            lines.append(f'{name}_bucket{{le="{bound:g}"}} {running}')
        lines.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum {self.total:.6f}")
        lines.append(f"{name}_count {self.count}")
        return lines


class ServeMetrics:
    """What ``/metrics`` shows: answers by route and status, rollouts finished by status
    and category, and how long rollouts and their model calls took."""

    def __init__(self) -> None:
        self.answers: Counter[tuple[str, int]] = Counter()
        self.finished: Counter[tuple[str, str]] = Counter()
        self.rollout_seconds = Histogram()
        self.model_call_seconds = Histogram()

    def answered(self, route: str, status: int) -> None:
        self.answers[(route, status)] += 1

    def recorded(self, result: ExecutionResult) -> None:
        category = result.error_category.value if result.error_category else ""
        self.finished[(result.status.value, category)] += 1
        self.rollout_seconds.observe(result.timings.total_sec)
        usage = result.usage
        if usage is not None and usage.model_calls:
            mean = usage.model_sec / usage.model_calls  # per call: the rollout's mean
            for _ in range(usage.model_calls):
                self.model_call_seconds.observe(mean)

    def render(self, health: dict[str, Any]) -> str:
        """The exposition text; ``health`` is the served rollouts' health (gauges)."""
        concurrency = health.get("concurrency") or {}
        out = [
            "# HELP osmo_run_serve_queued Rollouts admitted and waiting for a slot.",
            "# TYPE osmo_run_serve_queued gauge",
            f"osmo_run_serve_queued {int(concurrency.get('queued') or 0)}",
            "# HELP osmo_run_serve_running Rollouts running.",
            "# TYPE osmo_run_serve_running gauge",
            f"osmo_run_serve_running {int(concurrency.get('running') or 0)}",
            "# HELP osmo_run_serve_admitted_total Rollouts admitted (202).",
            "# TYPE osmo_run_serve_admitted_total counter",
            f"osmo_run_serve_admitted_total {int(health.get('admitted') or 0)}",
            "# HELP osmo_run_serve_queue_full_total Submissions refused with 429.",
            "# TYPE osmo_run_serve_queue_full_total counter",
            f"osmo_run_serve_queue_full_total {int(health.get('refused_queue_full') or 0)}",
            "# HELP osmo_run_serve_lease_expiries_total Rollouts ended by a lapsed lease.",
            "# TYPE osmo_run_serve_lease_expiries_total counter",
            f"osmo_run_serve_lease_expiries_total {int(health.get('lease_expiries') or 0)}",
            "# HELP osmo_run_serve_answers_total HTTP answers by route and status code.",
            "# TYPE osmo_run_serve_answers_total counter",
        ]
        for (route, status), count in sorted(self.answers.items()):
            out.append(f'osmo_run_serve_answers_total{{route="{route}",code="{status}"}} {count}')
        out += [
            "# HELP osmo_run_serve_finished_total Rollouts recorded, by status and category.",
            "# TYPE osmo_run_serve_finished_total counter",
        ]
        for (outcome, category), count in sorted(self.finished.items()):
            out.append(
                f'osmo_run_serve_finished_total{{status="{outcome}",category="{category}"}} {count}'
            )
        out += [
            "# HELP osmo_run_serve_rollout_seconds Rollout duration, slot to record.",
            "# TYPE osmo_run_serve_rollout_seconds histogram",
            *self.rollout_seconds.lines("osmo_run_serve_rollout_seconds"),
            "# HELP osmo_run_serve_model_call_seconds Model call duration (each rollout's mean).",
            "# TYPE osmo_run_serve_model_call_seconds histogram",
            *self.model_call_seconds.lines("osmo_run_serve_model_call_seconds"),
        ]
        return "\n".join(out) + "\n"
