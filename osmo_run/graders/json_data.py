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

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from osmo_run.graders.base import SettingsGrader, final_answer, missing_extra, quoted
from osmo_run.graders.settings import SettingsError
from osmo_run.graders.workers import GRADER_WORKERS
from osmo_run.sdk.context import GraderContext

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
_MAX_CANDIDATES = 200
"""Opening brackets tried when looking for JSON inside prose (each try is a parse)."""


def extract_json(text: str, strict: bool) -> tuple[Any, str] | str:
    """``(data, where it was found)``, or the reason no JSON was found."""
    try:
        return json.loads(text), "the whole answer"
    except json.JSONDecodeError as exc:
        whole_error = f"the answer is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if strict:
        return whole_error
    for block in reversed(_FENCE.findall(text)):
        try:
            return json.loads(block), "a fenced code block"
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"[{\[]", text)][:_MAX_CANDIDATES]
    for start in starts:
        try:
            data, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
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
                schema = json.loads(label)
            except json.JSONDecodeError as exc:
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
        failed = await GRADER_WORKERS.run(schema_failures, schema, data, warm=_jsonschema)
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
    order never matters.
    """
    if isinstance(want, bool) or isinstance(got, bool):
        same = isinstance(want, bool) and isinstance(got, bool) and got == want
        return None if same else f"{path}: {_json(got)} instead of {_json(want)}"
    if isinstance(want, int | float) and isinstance(got, int | float):
        same = got == want or (math.isnan(got) and math.isnan(want))
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
            unmatched = list(got)
            for i, item in enumerate(want):
                at = next(
                    (
                        j
                        for j, g in enumerate(unmatched)
                        if first_difference(g, item, settings) is None
                    ),
                    None,
                )
                if at is None:
                    return f"{path}: no item equal to {path}[{i}] = {_json(item)}"
                unmatched.pop(at)
            return None
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = first_difference(g, w, settings, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if type(got) is type(want) and got == want:
        return None
    return f"{path}: {_json(got)} instead of {_json(want)}"


def _json(value: Any, limit: int = 80) -> str:
    """``value`` written as JSON for an explanation, cut to ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class JsonEquals(SettingsGrader[JsonEqualsSettings]):
    """1.0 when the final answer's JSON equals the label as data. A label that is a
    string is read as JSON (``'{"a": 1}'``; a JSON string is ``'"abc"'``); any other
    label is the data itself."""

    settings_type = JsonEqualsSettings

    async def grade(self, ctx: GraderContext) -> float:
        want = ctx.label
        if isinstance(want, str):
            try:
                want = json.loads(want)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"JsonEquals: the label {quoted(ctx.label, 80)} is a string that is not "
                    f"JSON ({exc.msg}); write a JSON string label as '\"text\"'"
                ) from None
        found = _answer_json(ctx, self.settings.strict, "JsonEquals")
        if found is None:
            return 0.0
        got, where = found
        difference = first_difference(got, want, self.settings)
        if difference is None:
            ctx.explain(f"{where} equals the label as data")
            return 1.0
        ctx.explain(f"{where} differs from the label at {difference}")
        return 0.0
