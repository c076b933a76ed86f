"""The YAML run spec: loading, path anchoring, and errors that say what to fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from osmo_run.errors import SpecError
from osmo_run.run.configuring.spec import RunSpec, spec_json_schema
from osmo_run.run.configuring.spec_file import load_spec


def _spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "conf" / "spec.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _error(path: Path) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return str(info.value)


def test_valid_spec_loads_with_paths_anchored_at_its_directory(tmp_path: Path) -> None:
    path = _spec(
        tmp_path,
        """
workflow: pkg.mod:Flow
grader: pkg.mod:Judge
code_dir: ..
output: runs/out.jsonl
workflow_config:
  concurrency: {max_concurrent: 3}
  settings: {temperature: 0.5}
grader_config: {settings: {strict: true}}
timeouts: {agent_sec: 12, grader_sec: null}
llm: {base_url: "http://127.0.0.1:9/v1", model: m}
bad_rows: record
limit: 5
""",
    )
    spec = load_spec(path)
    assert spec.workflow == "pkg.mod:Flow"
    assert spec.code_dir == path.parent / ".."
    assert spec.output == path.parent / "runs" / "out.jsonl"
    assert spec.timeouts.agent_sec == 12
    assert spec.timeouts.grader_sec is None
    assert spec.bad_rows == "record"
    assert spec.limit == 5
    config = spec.build_workflow_config()
    assert config.concurrency.max_concurrent == 3
    assert config.settings == {"temperature": 0.5}
    assert spec.build_grader_config().settings == {"strict": True}
    assert spec.llm is not None and spec.llm.endpoint().api_key is None


def test_absolute_paths_are_kept(tmp_path: Path) -> None:
    path = _spec(tmp_path, f"workflow: a:B\noutput: {tmp_path / 'o.jsonl'}\n")
    assert load_spec(path).output == tmp_path / "o.jsonl"


def test_minimal_spec_has_documented_defaults(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, "workflow: a:B\n"))
    assert spec.timeouts.agent_sec == 600
    assert spec.timeouts.grader_sec == 120
    assert spec.bad_rows == "stop"
    assert spec.code_dir is None and spec.output is None and spec.grader is None
    assert spec.build_workflow_config().concurrency.max_concurrent == 4


def test_concurrency_overrides_the_workflow_config(tmp_path: Path) -> None:
    spec = load_spec(
        _spec(
            tmp_path,
            "workflow: a:B\nconcurrency: 9\nworkflow_config: {concurrency: {max_concurrent: 2}}\n",
        )
    )
    assert spec.build_workflow_config().concurrency.max_concurrent == 9


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "workflow: a:B\ntimeouts: {agent_sec: -1}\n",
            "field 'timeouts.agent_sec': Input should be greater than 0",
        ),
        (
            "workflow: a:B\nconcurrency: zero\n",
            "field 'concurrency': Input should be a valid integer",
        ),
        ("workflow: not-a-path\n", "field 'workflow': Value error, must be an import path"),
        ("grader: a:B\n", "field 'workflow': required field is missing"),
        ("workflow: a:B\nbad_rows: skip\n", "field 'bad_rows': Input should be 'stop' or 'record'"),
        (
            "workflow: a:B\nllm: {base_url: localhost, model: m}\n",
            "field 'llm.base_url': Value error, must start with http",
        ),
        (
            "workflow: a:B\nllm: {base_url: 'http://x/v1', model: m, capture: token}\n",
            "field 'llm.capture': Input should be 'tokens'",
        ),
        (
            "workflow: a:B\njudge: {base_url: 'http://x/v1', model: m, capture: tokens}\n",
            "field 'judge': Value error, capture records the workflow's model calls only",
        ),
    ],
)
def test_invalid_field_is_named_by_its_path(tmp_path: Path, text: str, expected: str) -> None:
    path = _spec(tmp_path, text)
    assert _error(path).startswith(f"{path}: {expected}")


def test_capture_tokens_reaches_the_endpoint(tmp_path: Path) -> None:
    text = "workflow: a:B\nllm: {base_url: 'http://x/v1', model: m, capture: tokens}\n"
    spec = load_spec(_spec(tmp_path, text))
    assert spec.llm is not None
    endpoint = spec.llm.endpoint()
    assert endpoint is not None and endpoint.capture_tokens
    plain = load_spec(_spec(tmp_path, "workflow: a:B\nllm: {base_url: 'http://x/v1', model: m}\n"))
    assert plain.llm is not None and not plain.llm.endpoint().capture_tokens  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "field", "suggestion"),
    [
        ("workflow: a:B\ntimeouts: {agnet_sec: 1}\n", "timeouts.agnet_sec", "agent_sec"),
        ("workflow: a:B\ngrder: a:C\n", "grder", "grader"),
        (
            "workflow: a:B\nllm: {base_url: 'http://x/v1', model: m, api_key: k}\n",
            "llm.api_key",
            "api_key_env",
        ),
    ],
)
def test_misspelt_key_suggests_the_right_one(
    tmp_path: Path, text: str, field: str, suggestion: str
) -> None:
    path = _spec(tmp_path, text)
    assert _error(path) == f"{path}: field {field!r}: unknown field; did you mean {suggestion!r}?"


def test_unknown_key_without_a_close_match_is_still_named(tmp_path: Path) -> None:
    path = _spec(tmp_path, "workflow: a:B\nzzzz: 1\n")
    assert _error(path) == f"{path}: field 'zzzz': unknown field"


def test_every_invalid_field_gets_its_own_line(tmp_path: Path) -> None:
    path = _spec(tmp_path, "workflow: a:B\nlimit: 0\nconcurrency: 0\n")
    lines = _error(path).splitlines()
    assert len(lines) == 2
    assert {line.split(":")[1] for line in lines} == {" field 'limit'", " field 'concurrency'"}


def test_bad_workflow_config_is_reported_as_a_spec_error(tmp_path: Path) -> None:
    path = _spec(tmp_path, "workflow: a:B\nworkflow_config: {temperature: 1}\n")
    assert _error(path) == (
        f"{path}: field 'workflow_config.temperature': unknown field; "
        "put the workflow's own options under workflow_config.settings"
    )


def test_text_that_is_not_yaml_is_refused_with_its_line(tmp_path: Path) -> None:
    path = _spec(tmp_path, "workflow: a:B\nlimit: [1, 2\n")
    message = _error(path)
    assert message.startswith(f"{path}:")
    assert "not valid YAML" in message


@pytest.mark.parametrize("text", ["- workflow: a:B\n", "just a string\n", ""])
def test_spec_that_is_not_a_mapping_is_refused(tmp_path: Path, text: str) -> None:
    path = _spec(tmp_path, text)
    assert _error(path).startswith(f"{path}: a spec is a YAML mapping")


def test_missing_spec_file_is_refused(tmp_path: Path) -> None:
    assert _error(tmp_path / "nope.yaml") == f"{tmp_path / 'nope.yaml'}: spec file not found"


def test_missing_api_key_variable_is_a_spec_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OSMO_TEST_UNSET_KEY", raising=False)
    spec = load_spec(
        _spec(
            tmp_path,
            "workflow: a:B\n"
            "llm: {base_url: 'http://x/v1', model: m, api_key_env: OSMO_TEST_UNSET_KEY}\n",
        )
    )
    assert spec.llm is not None
    with pytest.raises(SpecError, match="environment variable OSMO_TEST_UNSET_KEY is not set"):
        spec.llm.endpoint()
    monkeypatch.setenv("OSMO_TEST_UNSET_KEY", "sk-test")
    assert spec.llm.endpoint().api_key == "sk-test"


def test_json_schema_describes_the_spec() -> None:
    schema = json.loads(spec_json_schema())
    assert schema["title"] == "osmo-run run spec"
    assert "workflow" in schema["properties"]
    assert "workflow" in schema["required"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(RunSpec.model_fields)
