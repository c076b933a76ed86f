"""The run summary from an index's columns, by the same builder ``osmo-run report`` uses.

The index already holds what a summary needs of each record (status, category, reward,
grader skip, duration, row, usage), so the records are not parsed again: each row's
columns go to :class:`~osmo_run.run.reporting.summary.SummaryBuilder`, one implementation of the
statistics for the run's end, ``report`` and this page. About 4 s per million rows, once
per state of the results file (:mod:`.derived` caches the result).
"""

from __future__ import annotations

from osmo_run.run.reporting.summary import RunSummary, SummaryBuilder
from osmo_run.sdk.types import LLMUsage
from osmo_run.view.index import STATUSES, RowIndex


def _name(names: list[str] | tuple[str, ...], code: int) -> str | None:
    return names[code] if code >= 0 else None


def _known(value: float) -> float:
    return 0.0 if value != value else value  # NaN stands for a missing number


def run_summary(
    index: RowIndex, pass_threshold: float, samples_per_row: int, output: str | None
) -> RunSummary:
    """The summary of every indexed record, equal to ``osmo-run report``'s for the file."""
    cols = index.cols
    builder = SummaryBuilder(pass_threshold, samples_per_row)
    for position in range(index.count):
        calls = cols.model_calls[position]
        usage = None
        if calls > 0:
            usage = LLMUsage(
                model_calls=calls,
                prompt_tokens=int(_known(cols.prompt_tokens[position])),
                completion_tokens=int(_known(cols.completion_tokens[position])),
                model_sec=_known(cols.model_sec[position]),
            )
        reward = cols.reward[position]
        builder.add_values(
            STATUSES[cols.status[position]],
            _name(index.categories, cols.category[position]),
            None if reward != reward else reward,
            _name(index.skipped_reasons, cols.skipped[position]),
            cols.seconds[position],
            cols.row_index[position],
            usage,
        )
    return builder.build(output=output)
