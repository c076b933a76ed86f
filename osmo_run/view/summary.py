"""The run summary from an index's columns, at the speed of the columns.

:class:`~osmo_run.run.summary.SummaryBuilder` takes one rollout per call, about 4 µs
each: 4 s for a million rows, on every start of the viewer. Here the same
:class:`~osmo_run.run.summary.RunSummary` is computed from whole columns (counts, sums and
sorts that run in C), with the same rules (a reward counts only on a successful rollout;
failures count as 0 in the mean over all; usage over the rollouts that called a model)
and the same statistics functions (:mod:`osmo_run.run.stats`). A test holds the result
equal to ``osmo-run report``'s for the same files.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable
from functools import reduce
from itertools import compress

from osmo_run.run.stats import estimate_mean, mean_pass_at_k, pass_at_k_ks, percentile
from osmo_run.run.summary import RunSummary, UsageSummary
from osmo_run.view.index import STATUSES, RowIndex


def _added(values: Iterable[float]) -> float:
    """Left-to-right float addition, as the builder's ``+=`` does (``sum`` on Python 3.12+
    compensates rounding, so its last digits could differ from ``osmo-run report``'s)."""
    return reduce(operator.add, values, 0.0)


def _named(counts: Counter[int], names: list[str] | tuple[str, ...]) -> dict[str, int]:
    return {names[code]: n for code, n in counts.most_common() if code >= 0}


def _spread(values: list[float]) -> tuple[float | None, float | None, float | None]:
    values.sort()
    return percentile(values, 0.5), percentile(values, 0.95), values[-1] if values else None


def _usage(index: RowIndex) -> UsageSummary | None:
    cols = index.cols
    called = [c > 0 for c in cols.model_calls]
    if not any(called):
        return None

    def known(values: list[float]) -> list[float]:
        return [0.0 if v != v else v for v in values]

    prompt = known(list(compress(cols.prompt_tokens, called)))
    completion = known(list(compress(cols.completion_tokens, called)))
    totals = [p + c for p, c in zip(prompt, completion, strict=True)]
    seconds = known(list(compress(cols.model_sec, called)))
    return UsageSummary(
        rollouts=len(prompt),
        model_calls=sum(compress(cols.model_calls, called)),
        prompt_tokens=int(sum(prompt)),
        completion_tokens=int(sum(completion)),
        model_sec=_added(seconds),
        prompt_per_rollout=_spread(prompt),
        completion_per_rollout=_spread(completion),
        total_per_rollout=_spread(totals),
    )


def run_summary(
    index: RowIndex, pass_threshold: float, samples_per_row: int, output: str | None
) -> RunSummary:
    """The summary of every indexed record (see the module docstring)."""
    cols = index.cols
    total = index.count
    durations = sorted(cols.seconds)
    successful = [s == 0 for s in cols.status]
    graded_mask = [ok and r == r for ok, r in zip(successful, cols.reward, strict=True)]
    graded = list(compress(cols.reward, graded_mask))
    reward_sum = _added(graded)
    reward_sq = _added(r * r for r in graded)
    passed_mask = [r >= pass_threshold for r in graded]
    passed = sum(passed_mask)
    if samples_per_row > 1:
        per_row: dict[int, list[int]] = {}
        passing = iter(passed_mask)
        for row, was_graded in zip(cols.row_index, graded_mask, strict=True):
            counts = per_row.setdefault(row, [0, 0])
            counts[0] += 1
            counts[1] += next(passing) if was_graded else False
        rows = [(n, c) for n, c in per_row.values()]
        pass_k = {k: mean_pass_at_k(rows, k) for k in pass_at_k_ks(samples_per_row)}
    else:
        pass_k = {1: passed / total if total else None}
    return RunSummary(
        total=total,
        by_status=_named(Counter(cols.status), STATUSES),
        error_categories=_named(Counter(cols.category), index.categories),
        graded=len(graded),
        reward_sum=reward_sum,
        reward_min=min(graded) if graded else None,
        reward_max=max(graded) if graded else None,
        duration_p50=percentile(durations, 0.5),
        duration_p95=percentile(durations, 0.95),
        duration_max=durations[-1] if durations else None,
        grader_skipped=_named(Counter(cols.skipped), index.skipped_reasons),
        output=output,
        graded_estimate=estimate_mean(len(graded), reward_sum, reward_sq),
        all_estimate=estimate_mean(total, reward_sum, reward_sq),
        pass_threshold=pass_threshold,
        passed=passed,
        pass_at_k=pass_k,
        samples_per_row=samples_per_row,
        usage=_usage(index),
    )
