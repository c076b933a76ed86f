"""Run identity: the id follows what defines a run, the diff names what changed, and
informational settings never change the id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from osmo_run.errors import InputError
from osmo_run.run.configuring.spec import RunSpec
from osmo_run.run.executing.plan import plan_run
from osmo_run.run.executing.settings import RunSettings
from osmo_run.run.writing.manifest import MANIFEST_VERSION, Manifest, read_manifest, write_manifest
from tests.conftest import jsonl_bytes

DEFINING = {
    "workflow": "pkg:W",
    "grader": "pkg:G",
    "timeouts": {"agent_sec": 600.0, "grader_sec": 120.0},
    "dataset_sha256": "ab" * 32,
    "rows": 3,
    "samples_per_row": 1,
}


def test_run_id_is_the_dataset_stem_and_twelve_hex_digits_of_the_defining_fields() -> None:
    manifest = Manifest(DEFINING, dataset_name="mydata")
    assert manifest.run_id.startswith("mydata-")
    suffix = manifest.run_id.removeprefix("mydata-")
    assert len(suffix) == 12 and int(suffix, 16) >= 0
    assert suffix == manifest.digest[:12]


def test_run_id_ignores_info_and_key_order_but_follows_every_defining_value() -> None:
    base = Manifest(DEFINING, info={"concurrency": 4}, dataset_name="d")
    reordered = Manifest(dict(reversed(list(DEFINING.items()))), info={"concurrency": 64})
    reordered.dataset_name = "d"
    assert reordered.run_id == base.run_id
    for key, value in [("rows", 4), ("grader", None), ("timeouts", {"agent_sec": 5.0})]:
        changed = Manifest({**DEFINING, key: value}, dataset_name="d")
        assert changed.run_id != base.run_id, key


def test_differences_name_each_changed_field_with_old_and_new_values() -> None:
    before = Manifest(DEFINING)
    after = Manifest(
        {
            **{k: v for k, v in DEFINING.items() if k != "grader"},
            "timeouts": {"agent_sec": 5.0, "grader_sec": 120.0},
            "rows": 4,
            "shard": "1/2",
        }
    )
    assert after.differences(before) == [
        "  grader: 'pkg:G' -> (removed)",
        "  rows: 3 -> 4",
        "  shard: (absent) -> '1/2'",
        "  timeouts.agent_sec: 600.0 -> 5.0",
    ]
    assert before.differences(Manifest(dict(DEFINING))) == []


def test_differences_treat_equal_values_of_another_order_as_equal() -> None:
    a = Manifest({"settings": {"x": [1, 2], "y": {"b": 1, "a": 2}}})
    b = Manifest({"settings": {"y": {"a": 2, "b": 1}, "x": [1, 2]}})
    assert a.differences(b) == []
    assert a.differences(Manifest({"settings": {"x": [2, 1], "y": {"b": 1, "a": 2}}})) == [
        "  settings.x: [2, 1] -> [1, 2]"
    ]


def test_manifest_round_trips_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "results.manifest.json"
    manifest = Manifest(DEFINING, info={"concurrency": 4}, dataset_name="mydata")
    write_manifest(path, manifest)
    data = json.loads(path.read_text())
    assert data["schema_version"] == MANIFEST_VERSION
    assert data["run_id"] == manifest.run_id
    assert data["defining"] == DEFINING
    assert "written_at" in data["info"]
    assert not list(tmp_path.glob("*.tmp"))
    again = read_manifest(path)
    assert again is not None
    assert again.run_id == manifest.run_id
    assert again.differences(manifest) == []


def test_reading_a_missing_manifest_gives_none_and_a_broken_one_an_input_error(
    tmp_path: Path,
) -> None:
    assert read_manifest(tmp_path / "nope.json") is None
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1, "defin')
    with pytest.raises(InputError, match="cannot read the run manifest"):
        read_manifest(broken)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema_version": 99, "defining": {}}))
    with pytest.raises(InputError, match="not an osmo-run manifest of version 1"):
        read_manifest(other)
    listing = tmp_path / "list.json"
    listing.write_text("[]")
    with pytest.raises(InputError, match="not an osmo-run manifest"):
        read_manifest(listing)


def _manifest(
    tmp_path: Path, spec: dict[str, Any] | None = None, name: str = "data.jsonl"
) -> Manifest:
    path = tmp_path / name
    if not path.exists():
        path.write_bytes(jsonl_bytes([{"prompt": "a"}, {"prompt": "b"}]))
    run_spec = RunSpec.model_validate(
        {"workflow": "tests.workflows:ScriptedWorkflow", **(spec or {})}
    )
    return plan_run(RunSettings(dataset=path, spec=run_spec)).manifest


def test_settings_that_do_not_change_results_leave_the_run_id_alone(tmp_path: Path) -> None:
    base = _manifest(tmp_path)
    same = [
        _manifest(tmp_path, {"concurrency": 32}),
        _manifest(tmp_path, {"output": str(tmp_path / "elsewhere.jsonl")}),
        _manifest(tmp_path, {"bad_rows": "record"}),
    ]
    for manifest in same:
        assert manifest.run_id == base.run_id
        assert manifest.differences(base) == []
    assert _manifest(tmp_path, {"concurrency": 32}).info["concurrency"] == 32
    copy = tmp_path / "copy" / "data.jsonl"
    copy.parent.mkdir()
    copy.write_bytes((tmp_path / "data.jsonl").read_bytes())
    moved = _manifest(tmp_path, name="copy/data.jsonl")
    assert moved.run_id == base.run_id, "the dataset is identified by its content"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"grader": "tests.workflows:ScriptedGrader"}, "grader"),
        ({"timeouts": {"agent_sec": 5}}, "timeouts.agent_sec"),
        ({"samples_per_row": 4}, "samples_per_row"),
        ({"shard": "1/2"}, "shard"),
        ({"limit": 1}, "limit"),
        ({"workflow_config": {"settings": {"temperature": 1.0}}}, "workflow_settings.temperature"),
    ],
)
def test_settings_that_change_results_change_the_run_id_and_show_in_the_diff(
    tmp_path: Path, spec: dict[str, Any], field: str
) -> None:
    base = _manifest(tmp_path)
    changed = _manifest(tmp_path, spec)
    assert changed.run_id != base.run_id
    assert any(line.startswith(f"  {field}: ") for line in changed.differences(base))


def test_dataset_content_is_part_of_the_identity(tmp_path: Path) -> None:
    base = _manifest(tmp_path)
    (tmp_path / "data.jsonl").write_bytes(jsonl_bytes([{"prompt": "a"}, {"prompt": "B"}]))
    changed = _manifest(tmp_path)
    assert changed.run_id != base.run_id
    assert [line.split(":")[0] for line in changed.differences(base)] == ["  dataset_sha256"]
