"""The rows table's filters, sort and page: parsed from a query string, run over a
:class:`~osmo_run.view.index.RowIndex` without reading the file (free text aside).

With no filter and the default order, a page is a slice of the index: the first page of
a million-row run costs what it costs for a hundred rows.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from urllib.parse import urlencode

from osmo_run.view.index import PHASES, STATUSES, RowIndex
from osmo_run.view.search import matching_positions

SORTS = {
    "line": "file order (as rows finished)",
    "row": "row and sample",
    "reward": "reward",
    "seconds": "duration",
    "tokens": "tokens",
    "attempt": "attempts",
    "status": "status",
    "category": "error category",
}
PER_PAGE = (25, 50, 100, 200)
PASSING = ("no", "yes")
"""The ``passing`` filter: ``no`` is a success rewarded below the run's pass threshold (a
wrong answer: green in the status column, but not passing); ``yes`` is a pass."""
NO_CATEGORY = "none"
"""The category filter's value for rows without an error category."""


class QueryError(ValueError):
    """A filter value that cannot be used; the message names the field."""


def _float(params: Mapping[str, str], name: str) -> float | None:
    text = params.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise QueryError(f"{name}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise QueryError(f"{name}: {text!r} is not a finite number")
    return value


def _choice(params: Mapping[str, str], name: str, choices: Sequence[str]) -> str | None:
    value = params.get(name, "").strip()
    if not value:
        return None
    if value not in choices:
        raise QueryError(f"{name}: {value!r} is not one of {', '.join(choices)}")
    return value


@dataclass(frozen=True)
class RowQuery:
    """What the rows table shows. ``category`` is a category name or :data:`NO_CATEGORY`."""

    status: str | None = None
    category: str | None = None
    phase: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    text: str = ""
    passing: str | None = None
    sort: str = "line"
    descending: bool = False
    page: int = 1
    per_page: int = 50

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> RowQuery:
        """Read the query-string fields; raise :class:`QueryError` naming a bad one."""
        page_text = params.get("page", "1").strip() or "1"
        per_page_text = params.get("per_page", "50").strip() or "50"
        if not page_text.isdigit() or int(page_text) < 1:
            raise QueryError(f"page: {page_text!r} is not a page number (1, 2, ...)")
        if per_page_text not in {str(n) for n in PER_PAGE}:
            raise QueryError(f"per_page: {per_page_text!r} is not one of {PER_PAGE}")
        category = params.get("category", "").strip() or None
        return cls(
            status=_choice(params, "status", STATUSES),
            category=category,
            phase=_choice(params, "phase", PHASES),
            reward_min=_float(params, "reward_min"),
            reward_max=_float(params, "reward_max"),
            text=params.get("q", "").strip()[:200],
            passing=_choice(params, "passing", PASSING),
            sort=_choice(params, "sort", tuple(SORTS)) or "line",
            descending=params.get("order", "") == "desc",
            page=int(page_text),
            per_page=int(per_page_text),
        )

    @property
    def filtered(self) -> bool:
        return any(
            v is not None
            for v in (
                self.status,
                self.category,
                self.phase,
                self.reward_min,
                self.reward_max,
                self.passing,
            )
        ) or bool(self.text)

    def params(self, **changes: object) -> dict[str, str]:
        """The query-string fields of this query with ``changes`` applied (defaults left out)."""
        query = replace(self, **changes)  # type: ignore[arg-type]
        out = {
            "status": query.status or "",
            "category": query.category or "",
            "phase": query.phase or "",
            "reward_min": "" if query.reward_min is None else f"{query.reward_min:g}",
            "reward_max": "" if query.reward_max is None else f"{query.reward_max:g}",
            "q": query.text,
            "passing": query.passing or "",
            "sort": "" if query.sort == "line" else query.sort,
            "order": "desc" if query.descending else "",
            "page": "" if query.page == 1 else str(query.page),
            "per_page": "" if query.per_page == 50 else str(query.per_page),
        }
        return {k: v for k, v in out.items() if v}

    def url(self, base: str, **changes: object) -> str:
        params = self.params(**changes)
        return f"{base}?{urlencode(params)}" if params else base

    def sort_url(self, base: str, column: str) -> str:
        """A header link: sort by ``column``, flipping the order when it is already sorted."""
        descending = not self.descending if self.sort == column else column == "reward"
        return self.url(base, sort=column, descending=descending, page=1)


@dataclass
class RowPage:
    """One page of matching positions, and how many matched in all."""

    positions: list[int]
    total: int
    page: int
    pages: int


def _sort_key(index: RowIndex, sort: str) -> Callable[[int], float | tuple[float, ...]]:
    cols = index.cols
    low = -math.inf

    def nan_low(value: float) -> float:
        return low if value != value else value

    if sort == "row":
        return lambda i: (cols.row_index[i], cols.sample_index[i])
    if sort == "reward":
        return lambda i: nan_low(cols.reward[i])
    if sort == "seconds":
        return cols.seconds.__getitem__
    if sort == "tokens":
        return lambda i: nan_low(cols.prompt_tokens[i] + cols.completion_tokens[i])
    if sort == "attempt":
        return cols.attempt.__getitem__
    if sort == "status":
        return cols.status.__getitem__
    if sort == "category":
        names = index.categories
        return lambda i: (cols.category[i] >= 0, names[c] if (c := cols.category[i]) >= 0 else "")  # type: ignore[return-value]
    raise QueryError(f"sort: {sort!r} is not one of {', '.join(SORTS)}")


class QueryCache:
    """The matching positions of the last few queries (paging through a filtered million
    rows filters once), forgotten when the index changes."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[object, ...], list[int]] = OrderedDict()

    def get(self, key: tuple[object, ...], make: Callable[[], list[int]]) -> list[int]:
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        value = self._entries[key] = make()
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value


TextSearch = Callable[[str], set[int]]
"""More positions a free text matches, beyond the results file's own text (failed
rollouts' prompts, read back from the dataset)."""


def run_query(
    index: RowIndex,
    query: RowQuery,
    cache: QueryCache | None = None,
    threshold: float = 1.0,
    more_text: TextSearch | None = None,
) -> RowPage:
    """The page of ``query`` over ``index`` (which the caller has refreshed); ``threshold``
    is the run's pass threshold (the ``passing`` filter), ``more_text`` adds to what free
    text matches. A page past the last is the
    last (``?page=2001`` of 2000 showed "page 2001 of 2000" and an empty table)."""
    count = index.count
    if not query.filtered and query.sort == "line":
        last = max(1, -(-count // query.per_page))
        if query.page > last:
            query = replace(query, page=last)
    start = (query.page - 1) * query.per_page
    if not query.filtered and query.sort == "line":
        # The common case, and the one that must not grow with the run: a slice.
        if query.descending:
            positions = list(
                range(count - 1 - start, max(count - 1 - start - query.per_page, -1), -1)
            )
        else:
            positions = list(range(start, min(start + query.per_page, count)))
        return RowPage(positions, count, query.page, max(1, -(-count // query.per_page)))
    matches = _cached_matches(index, query, cache, threshold, more_text)
    total = len(matches)
    last = max(1, -(-total // query.per_page))
    if query.page > last:
        query = replace(query, page=last)
        start = (query.page - 1) * query.per_page
    return RowPage(
        matches[start : start + query.per_page],
        total,
        query.page,
        max(1, -(-total // query.per_page)),
    )


def _cached_matches(
    index: RowIndex,
    query: RowQuery,
    cache: QueryCache | None,
    threshold: float,
    more_text: TextSearch | None = None,
) -> list[int]:
    """The positions ``query`` matches, in its order; the page and its size do not change
    which rows match, so paging (and a row page's neighbours) reuse them."""
    filters = {k: v for k, v in vars(query).items() if k not in {"page", "per_page"}}
    key = (index.generation, index.count, *filters.values(), threshold)
    return (cache or QueryCache(0)).get(key, lambda: _matching(index, query, threshold, more_text))


@dataclass(frozen=True)
class Neighbors:
    """A row's place in a rows list: the rows before and after it there, its 1-based
    place (``None`` when the list does not hold it), the list's length and the list page
    holding it."""

    previous: int | None
    next: int | None
    place: int | None
    total: int
    page: int


def neighbors(
    index: RowIndex,
    query: RowQuery,
    position: int,
    cache: QueryCache | None = None,
    threshold: float = 1.0,
    more_text: TextSearch | None = None,
) -> Neighbors:
    """Where ``position`` is in the list ``query`` shows (its filters and sort; its page
    is ignored), so a row page's previous and next follow the list it was opened from."""
    count = index.count
    if not query.filtered and query.sort == "line":
        if not 0 <= position < count:
            return Neighbors(None, None, None, count, query.page)
        step = -1 if query.descending else 1
        before, after = position - step, position + step
        place = (count - position) if query.descending else position + 1
        return Neighbors(
            before if 0 <= before < count else None,
            after if 0 <= after < count else None,
            place,
            count,
            (place - 1) // query.per_page + 1,
        )
    matches = _cached_matches(index, query, cache, threshold, more_text)
    try:
        at = matches.index(position)
    except ValueError:
        return Neighbors(None, None, None, len(matches), query.page)
    return Neighbors(
        matches[at - 1] if at > 0 else None,
        matches[at + 1] if at + 1 < len(matches) else None,
        at + 1,
        len(matches),
        at // query.per_page + 1,
    )


def _matching(
    index: RowIndex,
    query: RowQuery,
    threshold: float = 1.0,
    more_text: TextSearch | None = None,
) -> list[int]:
    cols = index.cols
    candidates: Sequence[int] = range(index.count)
    if query.text:
        found = matching_positions(index, query.text)
        if more_text is not None:
            found |= more_text(query.text)
        candidates = sorted(found)
    if query.status is not None:
        code = STATUSES.index(query.status)
        candidates = [i for i in candidates if cols.status[i] == code]
    if query.category is not None:
        if query.category == NO_CATEGORY:
            candidates = [i for i in candidates if cols.category[i] < 0]
        elif query.category in index.categories:
            code = index.categories.index(query.category)
            candidates = [i for i in candidates if cols.category[i] == code]
        else:
            candidates = []
    if query.phase is not None:
        code = PHASES.index(query.phase)
        candidates = [i for i in candidates if cols.phase[i] == code]
    if query.reward_min is not None:
        low = query.reward_min
        candidates = [i for i in candidates if cols.reward[i] >= low]  # NaN compares False
    if query.reward_max is not None:
        high = query.reward_max
        candidates = [i for i in candidates if cols.reward[i] <= high]
    if query.passing is not None:
        success = STATUSES.index("success")
        passed = [cols.status[i] == success and cols.reward[i] >= threshold for i in candidates]
        if query.passing == "yes":
            candidates = [i for i, ok in zip(candidates, passed, strict=True) if ok]
        else:  # a wrong answer: succeeded, rewarded, below the threshold (NaN: not graded)
            candidates = [
                i
                for i, ok in zip(candidates, passed, strict=True)
                if not ok and cols.status[i] == success and cols.reward[i] == cols.reward[i]
            ]
    if query.sort == "line":
        ordered = list(candidates)
        if query.descending:
            ordered.reverse()
        return ordered
    return sorted(candidates, key=_sort_key(index, query.sort), reverse=query.descending)
