"""The workflow's own dependencies inside real Harbor trials (issue 13), through the real
``osmo-run harbor``, ``osmo-run validate`` and ``osmo-run cleanup --images``.

The code dir is ``deps_project`` (its ``pyproject.toml`` declares PyYAML, which the
trial image ``osmo-run/bookworm`` lacks). Each module-level fixture is one command with
its own osmo-run cache directory (``OSMO_RUN_CACHE_DIR``), so the first run of the module
resolves and downloads for real and the cache-hit test measures a warm cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harbor.conftest import (
    CALCULATOR_TASK,
    HERE,
    OSMO_RUN,
    HarborRun,
    cli_env,
    logging_docker,
    run_harbor,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PROJECT = HERE / "deps_project"
WORKFLOW = "depsflow.flows:YamlWorkflow"
ROWS: list[dict[str, Any]] = [
    {"id": "plain", "prompt": "hi", "metadata": {"answer": 42}},
    {"id": "toml", "prompt": "hi", "metadata": {"want_toml": True}},
]
MISSING = "osmo-run-no-such-package-zz>=1"


def _spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workflow": WORKFLOW,
        "code_dir": str(PROJECT),
        "concurrency": 2,
        "timeouts": {"agent_sec": 60, "grader_sec": 10},
        "requirements": {"extras": ["toml"]},
        "harbor": {"task_dir": str(CALCULATOR_TASK)},
    }
    spec.update(overrides)
    return spec


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("osmo-run-cache")


def _run(
    directory: Path, cache: Path, spec: dict[str, Any], *flags: str, **env_vars: str
) -> HarborRun:
    env = cli_env(OSMO_RUN_CACHE_DIR=str(cache), **env_vars)
    return run_harbor(directory, ROWS, spec, *flags, env=env, timeout=600)


@pytest.fixture(scope="module")
def prebuilt_run(
    docker_engine: None, tmp_path_factory: pytest.TempPathFactory, cache: Path
) -> HarborRun:
    return _run(tmp_path_factory.mktemp("deps-prebuilt"), cache, _spec())


@pytest.fixture(scope="module")
def prebuilt_again(
    prebuilt_run: HarborRun, tmp_path_factory: pytest.TempPathFactory, cache: Path
) -> HarborRun:
    """The same spec a second time: the cache and the image are warm. Its ``docker``
    commands are logged to ``docker.log`` beside its output."""
    directory = tmp_path_factory.mktemp("deps-prebuilt-again")
    path, _ = logging_docker(directory)
    return _run(directory, cache, _spec(), **path)


@pytest.fixture(scope="module")
def uploaded_run(
    docker_engine: None, tmp_path_factory: pytest.TempPathFactory, cache: Path
) -> HarborRun:
    return _run(tmp_path_factory.mktemp("deps-uploaded"), cache, _spec(), "--no-prebuild")


def _assert_imports_from_trial(run: HarborRun) -> None:
    assert run.returncode == 0, run.stderr[-2000:]
    for row_id in ("plain", "toml"):
        row = run.rows[row_id]
        assert row["status"] == "success", row["error_message"]
        assert row["info"]["yaml_file"].startswith("/opt/osmo-run/deps/yaml/")
        assert row["info"]["python"] == "3.11"  # the image's Python, not the host's
    assert run.rows["plain"]["sample"]["messages"][-1]["content"] == "answer: 42"
    assert run.rows["toml"]["info"]["tomli_w_file"].startswith("/opt/osmo-run/deps/")
    assert run.leftovers == []


def test_declared_dependency_is_importable_with_prebuild(prebuilt_run: HarborRun) -> None:
    _assert_imports_from_trial(prebuilt_run)
    assert all(row["info"]["yaml_pyc"] for row in prebuilt_run.rows.values())
    for row in prebuilt_run.rows.values():  # the image has them: nothing uploaded
        assert "dependencies_sec" not in row["timings"]


def test_declared_dependency_is_importable_without_prebuild(uploaded_run: HarborRun) -> None:
    _assert_imports_from_trial(uploaded_run)
    if shutil.which("python3.11"):  # the host byte-compiled the set for the image's 3.11
        assert all(row["info"]["yaml_pyc"] for row in uploaded_run.rows.values())
    for row in uploaded_run.rows.values():  # uploaded at setup: its time is in the row
        seconds = row["timings"]["dependencies_sec"]
        assert 0 < seconds <= row["timings"]["setup_sec"]


def test_second_run_reuses_the_cached_image(
    prebuilt_run: HarborRun, prebuilt_again: HarborRun
) -> None:
    """Nothing is downloaded, installed or built the second time: the second run gives
    docker no build or pull, and takes about a trial's time, not a build's."""
    _assert_imports_from_trial(prebuilt_again)
    commands = (prebuilt_again.output.parents[1] / "docker.log").read_text().splitlines()
    assert any(c.startswith("image inspect ") for c in commands), commands  # it was logged
    assert [c for c in commands if c.split()[:1] in (["build"], ["pull"])] == [], commands
    first_setup = max(r["timings"]["total_sec"] for r in prebuilt_run.rows.values())
    slowest_row = max(r["timings"]["total_sec"] for r in prebuilt_again.rows.values())
    print(
        f"first run {prebuilt_run.wall_sec:.1f}s (rows up to {first_setup:.1f}s), "
        f"second {prebuilt_again.wall_sec:.1f}s (rows up to {slowest_row:.1f}s)"
    )
    # Start-up beyond its rows: the CLI's own start and one image lookup. About 3 s on an
    # idle machine; CI's busy 2-core box may take several times that, hence the margin
    # (that no image was built is what the docker log above shows).
    assert prebuilt_again.wall_sec - slowest_row < 30.0, (prebuilt_again.wall_sec, slowest_row)


def _probe_containers() -> list[str]:
    listing = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=osmo-run.probe=1"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return listing.stdout.split()


@pytest.mark.parametrize("prebuild", ["--prebuild", "--no-prebuild"])
def test_unresolvable_requirement_stops_before_any_trial(
    docker_engine: None, tmp_path: Path, cache: Path, prebuild: str
) -> None:
    spec = _spec(requirements={"add": [MISSING]})
    run = _run(tmp_path, cache, spec, prebuild)
    assert run.returncode == 2
    assert len(run.error_lines) == 1, run.stderr
    assert run.error_lines[0] == (
        f"error: requirements: {MISSING} has no wheel for the trial image's Python 3.11 on "
        "manylinux_2_36_x86_64 on this machine's package index (sdists are never built for "
        "a trial); pick a version that ships wheels, or install it in the task's image and "
        "set `requirements: none`"
    )
    assert not run.output.exists()
    assert not (run.out_dir / "trials").exists()  # no trial started
    assert run.rows == {}
    assert _probe_containers() == []  # the image probe left no container


def test_validate_reports_the_same_line(docker_engine: None, tmp_path: Path, cache: Path) -> None:
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(json.dumps(_spec(requirements={"add": [MISSING]})))
    command = [str(OSMO_RUN), "validate", str(spec_file), "--task-dir", str(CALCULATOR_TASK)]
    env = cli_env(OSMO_RUN_CACHE_DIR=str(cache))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2
    problems = [line for line in done.stderr.splitlines() if line.startswith("problem: ")]
    assert problems == [
        f"problem: requirements: {MISSING} has no wheel for the trial image's "
        "Python 3.11 on manylinux_2_36_x86_64 on this machine's package index "
        "(sdists are never built for a trial); pick a version that ships "
        "wheels, or install it in the task's image and set `requirements: none`"
    ]
    good = tmp_path / "good.yaml"
    good.write_text(json.dumps(_spec()))
    done = subprocess.run(
        [str(OSMO_RUN), "validate", str(good), "--task-dir", str(CALCULATOR_TASK)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "ok: requirements: 2 (pyyaml>=6, tomli-w>=1) have wheels for the trial's Python 3.11"
        in done.stdout
    )


def _osmo_run_images() -> list[str]:
    tags = []
    for repository in ("osmo-run/prebuilt", "osmo-run/deps", "osmo-run/task"):
        listing = subprocess.run(
            ["docker", "image", "ls", "--filter", f"reference={repository}", "--format",
             "{{.Repository}}:{{.Tag}}"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        tags += listing.stdout.split()
    return tags


def test_cleanup_images_removes_only_images_no_recent_run_used(
    docker_engine: None, tmp_path: Path, cache: Path
) -> None:
    """A run with a code dir of its own builds its own prebuilt image; recorded as last
    used 3 hours ago, ``cleanup --images --unused-for 1h`` removes it and nothing else
    (every other osmo-run image on this shared engine is recorded as used now)."""
    code = tmp_path / "code"
    shutil.copytree(PROJECT, code)
    (code / "marker.txt").write_text(f"{time.time_ns()}")  # a prebuilt image of its own
    own_cache = tmp_path / "cache"
    shutil.copytree(cache, own_cache, dirs_exist_ok=True)
    run = _run(tmp_path / "run", own_cache, _spec(code_dir=str(code)))
    assert run.returncode == 0, run.stderr[-2000:]
    uses = own_cache / "image-uses"
    before = set(_osmo_run_images())
    recorded = {path.read_text(): path for path in uses.iterdir()}
    newest = max((p for p in uses.iterdir() if p.read_text().startswith("osmo-run/prebuilt")),
                 key=lambda p: p.stat().st_mtime)  # fmt: skip
    mine = newest.read_text()
    for tag in before - {mine}:  # every other image: used now
        record = recorded.get(tag) or uses / tag.replace("/", "_").replace(":", "_")
        record.write_text(tag)
    hours_ago = time.time() - 3 * 3600
    os.utime(newest, (hours_ago, hours_ago))
    done = subprocess.run(
        [str(OSMO_RUN), "cleanup", "--images", "--unused-for", "1h"],
        capture_output=True, text=True, env=cli_env(OSMO_RUN_CACHE_DIR=str(own_cache)),
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("removed 1 osmo-run images (")
    assert f"  removed {mine}" in done.stdout.splitlines()
    after = set(_osmo_run_images())
    assert mine not in after
    assert (before - {mine}) - after == set()  # nothing else went
