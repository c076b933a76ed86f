"""Hostile task input, without Docker: any ``metadata.harbor_task`` string is a clean
``InputError`` or a task under the root; a pathological ``task.toml`` is one problem,
never a crash; a task's ``build_timeout_sec`` of any value gives a usable limit."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from osmo_run.backends.harbor.docker import (  # noqa: E402
    DEFAULT_BUILD_TIMEOUT_SEC,
    build_failure,
    task_build_timeout,
)
from osmo_run.backends.harbor.preflight import check_task_dir, task_for_row  # noqa: E402
from osmo_run.errors import InputError  # noqa: E402
from tests.conftest import make_request  # noqa: E402
from tests.harbor.conftest import CALCULATOR_TASK, TASKS_ROOT  # noqa: E402

ANY_CHAR = st.characters(codec=None, exclude_categories=())  # surrogates and controls too
NAMES = st.one_of(
    st.text(ANY_CHAR, max_size=40),
    st.lists(
        st.sampled_from(["a", "/", ".", "..", "\x00", "\ud800", "~", " ", "b" * 90]), max_size=60
    ).map("".join),
    st.sampled_from(["second", "../..", "/etc", ".", "", "second/../second", "t" * 300]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES)
def test_any_harbor_task_name_is_a_task_under_the_root_or_an_input_error(name: str) -> None:
    request = make_request(metadata={"harbor_task": name})
    try:
        chosen = task_for_row(request, CALCULATOR_TASK, TASKS_ROOT)
    except InputError as exc:
        message = str(exc)
        assert "metadata.harbor_task" in message and len(message) <= 1200
        assert all(char.isprintable() for char in message), repr(message)
        return
    assert chosen.is_relative_to(TASKS_ROOT.resolve()) and chosen != TASKS_ROOT.resolve()


@pytest.mark.parametrize(
    "toml",
    [
        "x = " + "[" * 100_000 + "]" * 100_000,
        "x = " + "{a=" * 50_000 + "1" + "}" * 50_000,
        "[environment]\nbuild_timeout_sec = nan\ndocker_image = 'osmo-run/bookworm:latest'\n",
        "[environment]\ndocker_image = " + "'" + "\x01" + "'\n",
        '[agent]\ntimeout_sec = "soon"\n[environment]\ndocker_image = "x"\n',
    ],
    ids=["deep-arrays", "deep-tables", "nan", "control", "soon"],
)
def test_a_pathological_task_toml_is_problems_never_a_crash(tmp_path: Path, toml: str) -> None:
    task = tmp_path / "task"
    shutil.copytree(CALCULATOR_TASK, task)
    (task / "task.toml").write_text(toml, encoding="utf-8")
    for graded in (False, True):
        problems = check_task_dir(task, graded)
        assert all(isinstance(p, str) and len(p) <= 1200 for p in problems)
    assert task_build_timeout(task) > 0


@given(value=st.one_of(st.floats(allow_nan=True), st.integers(), st.booleans(), st.text()))
def test_any_build_timeout_sec_gives_a_positive_finite_limit(
    tmp_path_factory: pytest.TempPathFactory, value: object
) -> None:
    task = tmp_path_factory.mktemp("t")
    rendered = (
        repr(value)
        if not isinstance(value, float)
        else (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    )
    if isinstance(value, bool):
        rendered = str(value).lower()
    elif isinstance(value, str):
        rendered = '"' + value.encode("unicode_escape").decode().replace('"', '\\"') + '"'
    (task / "task.toml").write_text(f"[environment]\nbuild_timeout_sec = {rendered}\n")
    limit = task_build_timeout(task)
    assert 0 < limit < math.inf
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf:
        assert limit == float(value)
    else:
        assert limit == DEFAULT_BUILD_TIMEOUT_SEC


@given(output=st.text(ANY_CHAR, max_size=3000))
def test_a_failed_build_message_is_one_printable_line(output: str) -> None:
    message = build_failure(f"docker build -q --force-rm failed: {output}")
    assert "\n" not in message and len(message) <= 1000
    assert all(char.isprintable() for char in message), repr(message)


def test_a_lock_label_holding_a_newline_keeps_a_live_runs_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run directory whose path holds a newline or spaces: its containers' lock label
    is read whole, so the sweep asks about the right lock file."""
    import asyncio
    import json as json_module

    from osmo_run.backends.harbor import docker as docker_ops

    live = "/runs/a b\nc/results.jsonl.lock"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    listing = tmp_path / "listing"
    listing.write_text(f'c1 {json_module.dumps(live)}\nc2 ""\n')
    fake.write_text(
        f'#!/bin/sh\necho "$*" >> "{tmp_path / "calls"}"\ncase "$1" in ps) cat "{listing}";; esac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    asked: list[str] = []

    def keep(lock_file: str) -> bool:
        asked.append(lock_file)
        return lock_file == live

    removed = asyncio.run(docker_ops.remove_labelled("osmo-run.run-id=x", keep=keep))
    assert asked == [live]
    assert removed == (1, 0)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "rm -f c2" in calls and not any("c1" in call for call in calls if call.startswith("rm"))
