"""``osmo-run cleanup RUN`` reads the run from its files (paths and manifest) before it
touches the container engine: a run it cannot identify is refused in one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.conftest import CLI

WriteJsonl = Callable[..., Path]


def test_cleanup_of_a_run_without_its_manifest_is_refused(
    cli: CLI, tmp_path: Path, write_jsonl: WriteJsonl
) -> None:
    data = write_jsonl([{"prompt": "hi", "label": "hi"}])
    results = tmp_path / "run" / "out.jsonl"
    ran = cli.local(
        data,
        "--workflow",
        "tests.workflows:ScriptedWorkflow",
        "--grader",
        "tests.workflows:ScriptedGrader",
        "-o",
        results,
    )
    assert ran.returncode == 0, ran.stderr
    manifest = results.with_name("out.manifest.json")
    manifest.unlink()

    cleaned = cli("cleanup", results)

    assert cleaned.returncode == 2, cleaned.stdout + cleaned.stderr
    assert f"{manifest}: missing; cannot tell which run this is" in cleaned.stderr
    assert "Traceback" not in cleaned.stderr
    assert results.exists()
