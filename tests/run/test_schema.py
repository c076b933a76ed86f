"""The run spec's JSON Schema: ``schema/run-spec.json`` is what ``osmo-run schema`` prints, the
bundled configs point at it, and the schema and the loader accept the same specs.

The agreement test walks every field the schema names (nested sections too) and tries a set
of probe values in each, in a spec that is otherwise valid; for each, whether the loader
(``load_spec`` and the workflow and grader configs a run builds) accepts it must be whether a
JSON Schema validator does. What JSON Schema cannot say is listed, and checked, apart.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from osmo_run.errors import SpecError
from osmo_run.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from osmo_run.run.configuring.spec_file import load_spec
from tests.conftest import CLI, REPO

SCHEMA_FILE = REPO / "schema" / "run-spec.json"
SCHEMA_LINE = "# yaml-language-server: $schema=../schema/run-spec.json"

ENDPOINT = {"base_url": "http://127.0.0.1:8000/v1", "model": "m"}
BASE: dict[str, Any] = {"workflow": "pkg.mod:Workflow"}
# a field under llm or judge is probed in a section that is valid without it
CONTEXTS: dict[str, list[dict[str, Any]]] = {
    "llm": [{}, ENDPOINT, {"embedded": True}],
    "judge": [{}, ENDPOINT, {"embedded": True}],
}
PROBES: list[Any] = [
    *("3", "", "embedded", "a:b", "a:b:c", ":b", "1/2", "0/2", "2/8", " 2/8", "02/8"),
    *("http://x/v1", "https://x", "ftp://x", "stop", "record", "process", "none", EMBEDDED_MODEL),
    *(3, 0, -1, 3.0, 3.5, 0.5, 1.5, 2, True, False, None),
    *([], ["timeout"], ["validation_error"], ["cancelled"], ["nope"], [1], "timeout"),
    *({}, {"max_concurrent": 2}, {"max_concurrent": "2"}, {"max_concurrent": 0}),
    *({"settings": {}}, {"settings": {"t": None}}, {"x": 1}, {"concurrency": 5}),
    *({"settings": 1}, {"concurrency": {"max_concurrent": 2}, "settings": None}),
    {"embedded": True},
    ENDPOINT,
]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def _loader_accepts(data: dict[str, Any], tmp_path: Path) -> tuple[bool, str]:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    try:
        spec = load_spec(path)
        spec.build_workflow_config()
        spec.build_grader_config()
    except SpecError as exc:
        return False, str(exc)
    return True, ""


def _fields(
    schema: dict[str, Any], node: dict[str, Any], path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every field path of ``node`` and of the sections its fields refer to."""
    for name, sub in node.get("properties", {}).items():
        yield (*path, name)
        refs = [sub.get("$ref"), *(a.get("$ref") for a in sub.get("anyOf", []))]
        for ref in filter(None, refs):
            yield from _fields(schema, schema["$defs"][ref.rsplit("/", 1)[-1]], (*path, name))


def _specs(path: tuple[str, ...], value: Any) -> Iterator[dict[str, Any]]:
    for context in CONTEXTS.get(path[0], [{}]) if len(path) > 1 else [{}]:
        data = copy.deepcopy(BASE)
        if len(path) > 1:
            data[path[0]] = copy.deepcopy(context)
        section = data
        for part in path[:-1]:
            section = section.setdefault(part, {})
        section[path[-1]] = copy.deepcopy(value)
        yield data


def test_the_committed_schema_is_what_osmo_run_schema_prints(cli: CLI) -> None:
    proc = cli("schema")
    assert proc.returncode == 0, proc.stderr
    assert SCHEMA_FILE.read_text(encoding="utf-8") == proc.stdout, (
        "schema/run-spec.json differs from `osmo-run schema`; regenerate it: "
        "osmo-run schema > schema/run-spec.json"
    )


def test_the_schema_is_a_valid_draft_2020_12_schema(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("config", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_bundled_config_points_at_the_schema_and_both_accept_it(
    config: Path, schema: dict[str, Any]
) -> None:
    first = config.read_text(encoding="utf-8").splitlines()[0]
    assert first == SCHEMA_LINE
    assert (config.parent / first.split("=", 1)[1]).resolve() == SCHEMA_FILE
    load_spec(config)  # raises if the loader refuses it
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(data)) == []


def test_schema_and_loader_agree_on_every_field_and_probe_value(
    schema: dict[str, Any], tmp_path: Path
) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    paths = list(_fields(schema, schema))
    assert ("retries", "categories") in paths and ("llm", "base_url") in paths
    assert ("workflow_config", "concurrency", "max_concurrent") in paths
    disagreements = []
    tried = 0
    for path in paths:
        for value in PROBES:
            for data in _specs(path, value):
                if path == ("shard",) and value == "3/2":
                    continue  # K > N: below
                tried += 1
                loader, why = _loader_accepts(data, tmp_path)
                if loader != validator.is_valid(data):
                    disagreements.append(f"{'.'.join(path)}={value!r}: loader {loader} {why}")
    assert disagreements == []
    assert tried > 2000


@pytest.mark.parametrize(
    "text",
    [
        "workflow: a:B\nllm: embedded\njudge: embedded\n",
        f"workflow: a:B\nllm: {{embedded: true, model: {EMBEDDED_MODEL}}}\n",
        "workflow: a:B\nllm: {embedded: true, model: other}\n",
        "workflow: a:B\nllm: {embedded: true, base_url: 'http://x'}\n",
        "workflow: a:B\nllm: {embedded: false, base_url: 'http://x', model: m}\n",
        "workflow: a:B\nllm: {base_url: 'http://x'}\n",
        "workflow: a:B\nllm: local\n",
        'workflow: a:B\nconcurrency: "3"\n',
        "workflow: a:B\nconcurrency: 3.0\n",
        "workflow: a:B\nretries: {categories: [timeout, infra_error]}\n",
        "workflow: a:B\nretries: {categories: [timeout, validation_error]}\n",
        "workflow: a:B\nworkflow_config: {concurrency: 5}\n",
        "workflow: a:B\nworkflow_config: {settings: {temperature: 0.2}, concurrency: {}}\n",
        "workflow: a:B\ngrader_config: {threshold: 1}\n",
        "workflow: a:B\nharbor: {prebuild: yes, env: daytona, environment_kwargs: {cpus: 2}}\n",
        "workflow: a:B\nharbor: {prebuild: 'yes'}\n",
        "workflow: a:B\ntimeouts: {agent_sec: null, grader_sec: 1}\n",
        "workflow: a:B\ntimeouts: null\n",
        "workflow: a:B\nshard: 2/8\nlimit: 10\nsamples_per_row: 4\n",
        "workflow: a:B\nbad_rows: skip\n",
        "grader: a:B\n",
        "workflow: a:B\nworkflow: c:D\n",
        "workflow: a:B\nrows: '3,7,10-20'\n",
        "workflow: a:B\nrows: ' 3 , 7-9'\n",
        "workflow: a:B\nrows: 3\n",
        "workflow: a:B\nrows: '3,,4'\n",
        "workflow: a:B\nshuffle: true\n",
        "workflow: a:B\nshuffle: true\nlimit: null\n",
        "workflow: a:B\nshuffle: true\nlimit: 5\nseed: 7\n",
        "workflow: a:B\nshuffle: false\nseed: 3.0\n",
        "workflow: a:B\ndataset: {format: csv, id: uid, prompt: q, label: a.b, metadata: [x]}\n",
        "workflow: a:B\ndataset: {preset: verl, id: extra_info.index}\n",
        "workflow: a:B\ndataset: {preset: other}\n",
        "workflow: a:B\ndataset: {metadata: [a, '']}\n",
        "workflow: a:B\ndataset: {prompt: ''}\n",
        "workflow: a:B\ndataset: {format: xlsx}\n",
    ],
)
def test_schema_and_loader_agree_on_whole_specs(
    text: str, schema: dict[str, Any], tmp_path: Path
) -> None:
    data = yaml.safe_load(text)
    loader, why = _loader_accepts(data, tmp_path)
    assert loader == jsonschema.Draft202012Validator(schema).is_valid(data), why


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (("shard",), "3/2"),  # K at most N: no JSON Schema keyword compares two numbers
        (("timeouts", "agent_sec"), math.inf),  # YAML's .inf: JSON cannot write it
        (("pass_threshold",), math.nan),  # YAML's .nan
        (("rows",), "9-3"),  # a range runs low to high: no keyword compares two numbers
    ],
)
def test_what_json_schema_cannot_say_is_the_loaders_alone(
    field: tuple[str, ...], value: Any, schema: dict[str, Any], tmp_path: Path
) -> None:
    (data,) = _specs(field, value)
    assert jsonschema.Draft202012Validator(schema).is_valid(data)
    assert not _loader_accepts(data, tmp_path)[0]


def test_a_quoted_number_is_refused_saying_to_drop_the_quotes(tmp_path: Path) -> None:
    ok, why = _loader_accepts({**BASE, "concurrency": "3"}, tmp_path)
    assert not ok
    assert why == (
        f"{tmp_path / 'spec.yaml'}: field 'concurrency': Input should be a valid integer "
        "(got the string '3'; write the value without quotes)"
    )
