"""Which rows of a dataset run: ``--rows 3,7,10-20`` and ``--shuffle --seed N``.

The steps, in order (each sees what the previous one kept):

1. every row of the file, by index (0 = the first row; results' ``row_index``);
2. ``rows`` keeps the listed indexes (ranges inclusive);
3. ``shuffle`` with ``seed`` draws ``limit`` of them at random, reproducibly; without
   ``shuffle``, ``limit`` keeps the first ones;
4. ``shard K/N`` keeps every N-th of those, from the K-th;
5. ``--smoke`` draws its subset from what is left.

Rows always run in file order: the file is read as a stream, never held in memory, so
``shuffle`` decides *which* rows run, not their order (and needs ``limit``).
"""

from __future__ import annotations

import bisect
import random
import re
from collections.abc import Iterable

ROWS = re.compile(r" *[0-9]+( *- *[0-9]+)?( *, *[0-9]+( *- *[0-9]+)?)* *")
"""What ``--rows`` accepts (as the spec's JSON Schema says): indexes and ranges, commas."""
_INDEX = re.compile(r"[0-9]+")


class RowRanges:
    """Row indexes as sorted, disjoint, inclusive ranges: memory by range, not by row."""

    def __init__(self, ranges: tuple[tuple[int, int], ...]) -> None:
        self.ranges = ranges
        self._starts = [low for low, _ in ranges]

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        at = bisect.bisect_right(self._starts, index) - 1
        return at >= 0 and index <= self.ranges[at][1]

    def __len__(self) -> int:
        return sum(high - low + 1 for low, high in self.ranges)

    @property
    def last(self) -> int:
        """The highest index selected."""
        return self.ranges[-1][1]

    def __str__(self) -> str:
        return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranges)


def parse_rows(text: str) -> RowRanges:
    """``"3,7,10-20"`` as :class:`RowRanges` (merged, sorted); ``ValueError`` saying what
    is wrong otherwise."""
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        item = part.strip()
        low_text, dash, high_text = (text.strip() for text in item.partition("-"))
        if not _INDEX.fullmatch(low_text) or (dash and not _INDEX.fullmatch(high_text)):
            raise ValueError(
                f"{item!r} is not a row index or a range like 10-20 (rows are counted from 0)"
            )
        low = int(low_text)
        high = int(high_text) if dash else low
        if low < 0 or high < low:
            raise ValueError(f"{item!r}: a range goes from a lower index to a higher one, from 0")
        ranges.append((low, high))
    return RowRanges(tuple(_merged(sorted(ranges))))


def _merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for low, high in ranges:
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def shuffled_pick(eligible: int, limit: int, seed: int) -> frozenset[int]:
    """The positions (among ``eligible`` rows) that ``--shuffle --seed`` keeps: ``limit``
    of them drawn without replacement, the same for the same seed and row count."""
    return frozenset(random.Random(seed).sample(range(eligible), min(limit, eligible)))
