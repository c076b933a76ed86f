"""JSON graders: the answer holds JSON (``JsonValid``), matches a JSON Schema
(``JsonSchema``, through the ``jsonschema`` extra: ``pip install 'osmo-run[json]'``), or
equals the label as data (``JsonEquals``).

The JSON is the whole final answer, or else (unless ``strict``) its last fenced code
block, or else the first object or array in it, so ``Here it is: {"a": 1}`` holds JSON.
``JsonValid`` and ``JsonEquals`` are stdlib only. ``JsonSchema`` validates in a grader
worker process, where a schema whose work is unbounded (a backtracking ``pattern``) is
killed at the deadline.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from osmo_run.graders.base import SettingsGrader, final_answer, missing_extra, quoted
from osmo_run.graders.settings import SettingsError
from osmo_run.graders.workers import GRADER_WORKERS
from osmo_run.sdk.context import GraderContext

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
_MAX_CANDIDATES = 200
"""Opening brackets tried when looking for JSON inside prose (each try is a parse)."""


_INT_DIGITS = 4000
"""Integers longer than this are read as :class:`~decimal.Decimal` (exact, and beyond
Python's limit on converting text to ``int``)."""


def _read_int(text: str) -> int | Decimal:
    return int(text) if len(text) <= _INT_DIGITS else Decimal(text)


class _NotStandardJson(ValueError):
    """``NaN`` or ``Infinity``, which Python reads but RFC 8259 (and ``strict``) does not."""


def _refuse_constant(name: str) -> Any:
    raise _NotStandardJson(name)


_LENIENT = json.JSONDecoder(parse_int=_read_int)
_STANDARD = json.JSONDecoder(parse_int=_read_int, parse_constant=_refuse_constant)


def _parse_problem(exc: Exception) -> str:
    """What is wrong with text the parser refused, for an explanation."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, _NotStandardJson):
        return f"{exc}: NaN and Infinity are not JSON"
    if isinstance(exc, RecursionError):
        return "nested too deeply to read"
    return str(exc)


def _decode(decoder: json.JSONDecoder, text: str, start: int = 0) -> Any:
    """The JSON value at ``start`` of ``text``; raises ``ValueError`` (a
    ``JSONDecodeError`` for a syntax error) or ``RecursionError`` (nested too deeply)."""
    data, _ = decoder.raw_decode(text, start)
    return data


def parse_json(text: str, strict: bool = False) -> Any:
    """``text`` read as one JSON document; ``strict`` refuses ``NaN`` and ``Infinity``.

    Raises ``ValueError`` saying what is wrong: a syntax error (``JSONDecodeError``),
    a refused constant, or nesting too deep for the parser (from ``RecursionError``).
    """
    decoder = _STANDARD if strict else _LENIENT
    try:
        return decoder.decode(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(_parse_problem(exc)) from None


def extract_json(text: str, strict: bool) -> tuple[Any, str] | str:
    """``(data, where it was found)``, or the reason no JSON was found."""
    try:
        return parse_json(text, strict), "the whole answer"
    except ValueError as exc:
        whole_error = f"the answer is not JSON ({exc})"
    if strict:
        return whole_error
    for block in reversed(_FENCE.findall(text)):
        try:
            return parse_json(block), "a fenced code block"
        except ValueError:
            continue
    # each try parses until the text stops being JSON: bound the characters all tries read
    # together, or 200 brackets before an unclosed megabyte would read it 200 times
    budget = 2 * len(text) + 10_000
    for match in itertools.islice(re.finditer(r"[{\[]", text), _MAX_CANDIDATES):
        start = match.start()
        try:
            data = _decode(_LENIENT, text, start)
        except json.JSONDecodeError as exc:
            budget -= exc.pos - start + 1
            if budget < 0:
                break
            continue
        except (ValueError, RecursionError):
            budget -= len(text) - start  # how far it read is unknown: assume all of it
            if budget < 0:
                break
            continue
        return data, f"the {'object' if text[start] == '{' else 'array'} at character {start}"
    return whole_error + ", and no fenced block, object or array in it parses"


@dataclass(frozen=True, kw_only=True)
class JsonSettings:
    """Where the JSON is read from."""

    strict: bool = False
    """The whole answer must be JSON (no prose, no code fence around it)."""


def _answer_json(ctx: GraderContext, strict: bool, grader: str) -> tuple[Any, str] | None:
    """The answer's JSON, or ``None`` after explaining why there is none."""
    answer = final_answer(ctx.sample)
    if answer is None:
        ctx.explain(f"{grader}: the sample has no assistant message with text; reward 0")
        return None
    found = extract_json(answer.strip(), strict)
    if isinstance(found, str):
        ctx.explain(f"{found}: {quoted(answer)}")
        return None
    return found


class JsonValid(SettingsGrader[JsonSettings]):
    """1.0 when the final answer holds JSON; the label is not used."""

    settings_type = JsonSettings

    async def grade(self, ctx: GraderContext) -> float:
        found = _answer_json(ctx, self.settings.strict, "JsonValid")
        if found is None:
            return 0.0
        data, where = found
        ctx.explain(f"{where} is JSON: {quoted(data)}")
        return 1.0


def _jsonschema() -> Any:
    try:
        import jsonschema
    except ImportError as exc:
        raise missing_extra("JsonSchema", "jsonschema", "json", exc) from None
    return jsonschema


def _schema_problem(schema: object) -> str | None:
    """Why ``schema`` is not a JSON Schema (for its own draft), or ``None``."""
    if not isinstance(schema, dict | bool):
        return f"must be a JSON Schema object, got {type(schema).__name__}"
    jsonschema = _jsonschema()
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"is not a valid JSON Schema: {exc.message}"
    return None


@dataclass(frozen=True, kw_only=True)
class JsonSchemaSettings(JsonSettings):
    """``JsonSchema`` settings."""

    schema: dict[str, Any] | None = None
    """The JSON Schema; default: each row's label is its schema (an object, or a string
    holding one)."""

    def check(self) -> None:
        if self.schema is not None:
            problem = _schema_problem(self.schema)
            if problem is not None:
                raise SettingsError("schema", problem)


def _json_path(parts: Any) -> str:
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def schema_failures(schema: Any, data: Any) -> tuple[str, list[str]] | None:
    """``None`` when ``data`` matches ``schema``, else ``(the best error, the first five
    errors)``, each ``"$.path: message"``. A schema's ``pattern`` may backtrack for hours:
    this runs in a grader worker process (:mod:`osmo_run.graders.workers`)."""
    jsonschema = _jsonschema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = list(validator.iter_errors(data))
    if not errors:
        return None
    best = jsonschema.exceptions.best_match(errors)
    problems = [f"{_json_path(e.absolute_path)}: {e.message}" for e in errors[:5]]
    return f"{_json_path(best.absolute_path)}: {best.message}", problems


class JsonSchema(SettingsGrader[JsonSchemaSettings]):
    """1.0 when the final answer holds JSON that the schema accepts (the schema's own
    draft, formats not asserted); the explanation names the first failing path."""

    settings_type = JsonSchemaSettings

    @classmethod
    def validate_settings(cls, settings: dict[str, Any]) -> None:
        super().validate_settings(settings)
        _jsonschema()  # missing extra: one error before any row runs
        GRADER_WORKERS.prestart(schema_failures, warm=_jsonschema)

    def _schema(self, label: object) -> Any:
        if self.settings.schema is not None:
            return self.settings.schema
        schema = label
        if isinstance(label, str):
            try:
                schema = parse_json(label)
            except ValueError as exc:
                raise ValueError(f"JsonSchema: the label is not a JSON Schema ({exc})") from None
        problem = _schema_problem(schema)
        if problem is not None:
            raise ValueError(f"JsonSchema: the label (the row's schema) {problem}")
        return schema

    async def grade(self, ctx: GraderContext) -> float:
        schema = self._schema(ctx.label)
        found = _answer_json(ctx, self.settings.strict, "JsonSchema")
        if found is None:
            return 0.0
        data, where = found
        try:
            failed = await GRADER_WORKERS.run(schema_failures, schema, data, warm=_jsonschema)
        except RecursionError:
            ctx.explain(f"{where} is nested too deeply to check against the schema; reward 0")
            return 0.0
        if failed is None:
            ctx.explain(f"{where} matches the schema: {quoted(data)}")
            return 1.0
        best, problems = failed
        ctx.explain(f"{where} fails the schema at {best}", schema_errors=problems)
        return 0.0


@dataclass(frozen=True, kw_only=True)
class JsonEqualsSettings(JsonSettings):
    """``JsonEquals`` settings."""

    ignore_list_order: bool = False
    """Lists are equal when they hold the same items in any order."""
    allow_extra_keys: bool = False
    """The answer's objects may hold keys the label's do not."""


def first_difference(
    got: Any, want: Any, settings: JsonEqualsSettings, path: str = "$"
) -> str | None:
    """Where and how ``got`` differs from ``want`` as JSON data, or ``None`` when equal.

    Numbers compare by value (``1`` equals ``1.0``); ``true`` is not ``1``; object key
    order never matters. With ``ignore_list_order`` a list equals any permutation of it:
    items are paired by a maximum bipartite matching, so an answer item that could stand
    for several label items never blocks a pairing that exists. Raises ``RecursionError``
    for data nested too deeply to walk.
    """
    if isinstance(want, bool) or isinstance(got, bool):
        same = isinstance(want, bool) and isinstance(got, bool) and got == want
        return None if same else f"{path}: {_json(got)} instead of {_json(want)}"
    if isinstance(want, _NUMBER) and isinstance(got, _NUMBER):
        same = got == want or (_is_nan(got) and _is_nan(want))
        return None if same else f"{path}: {_json(got)} instead of {_json(want)}"
    if isinstance(want, dict) and isinstance(got, dict):
        missing = [k for k in want if k not in got]
        if missing:
            return f"{path}: missing key {missing[0]!r}"
        extra = [k for k in got if k not in want]
        if extra and not settings.allow_extra_keys:
            return f"{path}: unexpected key {extra[0]!r}"
        for key in want:
            found = first_difference(got[key], want[key], settings, f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return f"{path}: {len(got)} items instead of {len(want)}"
        if settings.ignore_list_order:
            return _unordered_difference(got, want, settings, path)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = first_difference(g, w, settings, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if type(got) is type(want) and got == want:
        return None
    return f"{path}: {_json(got)} instead of {_json(want)}"


_NUMBER = (int, float, Decimal)


def _is_nan(value: Any) -> bool:
    return isinstance(value, float | Decimal) and value != value


def _canonical(value: Any) -> Any:
    """A hashable form of ``value`` that is equal exactly when the data is equal with
    list order ignored (and no extra keys allowed): sorted lists and objects."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, _NUMBER):
        return ("nan",) if _is_nan(value) else ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("list", tuple(sorted(_canonical(v) for v in value)))
    if isinstance(value, dict):
        return ("object", tuple(sorted((k, _canonical(v)) for k, v in value.items())))
    return ("null",)


def _unordered_difference(
    got: list[Any], want: list[Any], settings: JsonEqualsSettings, path: str
) -> str | None:
    """How ``got`` differs from ``want`` as lists of the same length in any order."""
    if not settings.allow_extra_keys:
        # equality is then an equivalence: compare multisets of canonical forms
        left = Counter(_canonical(g) for g in got)
        for i, item in enumerate(want):
            key = _canonical(item)
            if left[key] == 0:
                return f"{path}: no item equal to {path}[{i}] = {_json(item)}"
            left[key] -= 1
        return None
    # Pair equal items first: safe, as "may stand for" is transitive (an item that could
    # take an equal item's partner could take the equal item itself), and it leaves the
    # quadratic matching below only the items that differ.
    equal: dict[Any, list[int]] = {}
    for j, g in enumerate(got):
        equal.setdefault(_canonical(g), []).append(j)
    rest_want = []
    for i, w in enumerate(want):
        same = equal.get(_canonical(w))
        if same:
            same.pop()
        else:
            rest_want.append(i)
    rest_got = [j for indices in equal.values() for j in indices]
    # an answer item may stand for several label items: pair them by a maximum matching
    partners = [
        [k for k, j in enumerate(rest_got) if first_difference(got[j], want[i], settings) is None]
        for i in rest_want
    ]
    unpaired = _unpaired(partners, len(rest_got))
    if unpaired is None:
        return None
    i = rest_want[unpaired]
    reason = " left once the others are paired" if partners[unpaired] else ""
    return f"{path}: no item equal to {path}[{i}] = {_json(want[i])}{reason}"


def _unpaired(partners: list[list[int]], right_size: int) -> int | None:
    """A left vertex that a maximum matching of the bipartite graph ``partners`` (left
    vertex -> the right vertices it may pair with) leaves unpaired; ``None`` when every
    left vertex is paired. Augmenting paths found by breadth-first search (no recursion)."""
    owner: list[int | None] = [None] * right_size
    for start, candidates in enumerate(partners):
        if not candidates:
            return start
        came_from: dict[int, int | None] = {}  # right vertex -> the right vertex before it
        queue: list[int] = []
        for right in candidates:
            if right not in came_from:
                came_from[right] = None
                queue.append(right)
        free = None
        for right in queue:  # the queue grows while it is walked
            holder = owner[right]
            if holder is None:
                free = right
                break
            for following in partners[holder]:
                if following not in came_from:
                    came_from[following] = right
                    queue.append(following)
        if free is None:
            return start
        # augment: walking back from the free vertex, each one on the path passes to the
        # holder of the vertex before it, and the first to ``start``
        vertex: int | None = free
        while vertex is not None:
            before = came_from[vertex]
            owner[vertex] = start if before is None else owner[before]
            vertex = before
    return None


def _json(value: Any, limit: int = 80) -> str:
    """``value`` written as JSON for an explanation, cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):  # nested too deeply, or an int too long to write
        text = "..."
    return text if len(text) <= limit else text[: limit - 3] + "..."


MAX_LABEL_DEPTH = 100
"""The deepest nesting a ``JsonEquals`` label may have: comparing walks it recursively."""


def nesting_depth(value: Any) -> int:
    """How deeply ``value``'s lists and objects nest (a scalar: 0), without recursion."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


class JsonEquals(SettingsGrader[JsonEqualsSettings]):
    """1.0 when the final answer's JSON equals the label as data. A label that is a
    string is read as JSON (``'{"a": 1}'``; a JSON string is ``'"abc"'``); any other
    label is the data itself."""

    settings_type = JsonEqualsSettings

    async def grade(self, ctx: GraderContext) -> float:
        want = ctx.label
        if isinstance(want, str):
            try:
                want = parse_json(want)
            except ValueError as exc:
                raise ValueError(
                    f"JsonEquals: the label {quoted(ctx.label, 80)} is a string that is not "
                    f"JSON ({exc}); write a JSON string label as '\"text\"'"
                ) from None
        if nesting_depth(want) > MAX_LABEL_DEPTH:
            raise ValueError(
                f"JsonEquals: the label nests more than {MAX_LABEL_DEPTH} levels deep; "
                "flatten it or grade with a custom grader"
            )
        found = _answer_json(ctx, self.settings.strict, "JsonEquals")
        if found is None:
            return 0.0
        got, where = found
        try:
            difference = first_difference(got, want, self.settings)
        except RecursionError:
            ctx.explain(f"{where} is nested too deeply to compare with the label; reward 0")
            return 0.0
        if difference is None:
            ctx.explain(f"{where} equals the label as data")
            return 1.0
        ctx.explain(f"{where} differs from the label at {difference}")
        return 0.0
