"""``osmo-run serve`` chooses its backend: the local one by default, Harbor trials with
``--backend harbor`` or a flag naming the task (``--task-dir``, ``--tasks-root``), built from
the harbor flags and the spec's ``harbor:`` section as ``osmo-run harbor`` builds it; flags
that do not fit the choice are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer

from osmo_run.backends.local import LocalBackend
from osmo_run.serve.session import ServeRun
from tests.conftest import CLI, REPO, require_extra

CALCULATOR_TASK = REPO / "tasks" / "calculator"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[ServeRun]:
    """The serving runs the command would start (it stops before listening)."""
    runs: list[ServeRun] = []

    def run_serving(run: ServeRun) -> int:
        runs.append(run)
        raise typer.Exit(0)

    monkeypatch.setattr("osmo_run.serve.session.run_serving", run_serving)
    return runs


def _spec(tmp_path: Path, **fields: Any) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        json.dumps({"workflow": "tests.workflows:NoopWorkflow", "code_dir": str(REPO), **fields})
    )
    return spec


def _serve(cli: CLI, tmp_path: Path, *args: str | Path) -> Any:
    output = tmp_path / "out" / "results.jsonl"
    return cli("serve", "--port", "0", "--display", "none", "-o", output, *args)


def test_without_harbor_flags_a_spec_with_a_harbor_section_serves_locally(
    cli: CLI, tmp_path: Path, served: list[ServeRun]
) -> None:
    spec = _spec(tmp_path, harbor={"task_dir": str(CALCULATOR_TASK)})
    done = _serve(cli, tmp_path, "--spec", spec)
    assert done.returncode == 0, done.stderr
    (run,) = served
    assert isinstance(run.backend.inner, LocalBackend)


def test_task_dir_serves_in_harbor_trials_built_from_the_flags(
    cli: CLI, tmp_path: Path, served: list[ServeRun]
) -> None:
    require_extra("harbor", "harbor")
    from osmo_run.backends.harbor import HarborBackend

    spec = _spec(tmp_path)
    done = _serve(
        cli,
        tmp_path,
        "--spec",
        spec,
        "--task-dir",
        CALCULATOR_TASK,
        "--no-prebuild",
        "--concurrency",
        "3",
    )
    assert done.returncode == 0, done.stderr
    (run,) = served
    backend = run.backend.inner
    assert isinstance(backend, HarborBackend)
    health = run.backend.health()
    assert (health["backend"], health["environment"], health["max_concurrency"]) == (
        "harbor",
        "docker",
        3,
    )
    assert backend._task_dir == CALCULATOR_TASK.resolve()
    assert backend._prebuild is False
    assert backend._trials_dir == (tmp_path / "out" / "trials").resolve()
    assert health["run_id"].startswith("serve-")


def test_backend_harbor_takes_the_task_from_the_specs_harbor_section(
    cli: CLI, tmp_path: Path, served: list[ServeRun]
) -> None:
    require_extra("harbor", "harbor")
    from osmo_run.backends.harbor import HarborBackend

    trials = tmp_path / "elsewhere"
    spec = _spec(tmp_path, harbor={"task_dir": str(CALCULATOR_TASK), "trials_dir": str(trials)})
    done = _serve(cli, tmp_path, "--spec", spec, "--backend", "harbor")
    assert done.returncode == 0, done.stderr
    (run,) = served
    backend = run.backend.inner
    assert isinstance(backend, HarborBackend)
    assert backend._task_dir == CALCULATOR_TASK.resolve()
    assert backend._trials_dir == trials.resolve()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--env", "daytona"],
            "error: --env: harbor flags, for rollouts in Harbor trials; add --backend harbor",
        ),
        (
            ["--backend", "local", "--task-dir", str(CALCULATOR_TASK)],
            "error: --task-dir: harbor flags",
        ),
        (["--backend", "harbor"], "error: give --task-dir DIR (or harbor.task_dir in the spec)"),
        (
            ["--task-dir", str(CALCULATOR_TASK), "--isolation", "process"],
            "error: --isolation is for the local backend",
        ),
        (["--backend", "docker"], "error: --backend: 'docker' is not one of local, harbor"),
        (
            ["--task-dir", str(CALCULATOR_TASK), "--env", "nowhere"],
            "error: --env: 'nowhere' is not a Harbor environment",
        ),
    ],
)
def test_flags_that_do_not_fit_the_backend_are_refused_in_one_line(
    cli: CLI, tmp_path: Path, served: list[ServeRun], args: list[str], message: str
) -> None:
    if "harbor" in args or "--task-dir" in args:
        require_extra("harbor", "harbor")
    done = _serve(cli, tmp_path, "--spec", _spec(tmp_path), *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert served == []


def test_a_harbor_server_holds_its_run_lock_while_it_serves(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trials' containers carry the lock file's path: held while the server lives,
    no other run's sweep and no ``osmo-run cleanup`` takes them for a dead run's."""
    require_extra("harbor", "harbor")
    from osmo_run.run.writing.runfiles import RunPaths
    from osmo_run.run.writing.runlock import held_by_another, lock_path

    lock = lock_path(RunPaths(tmp_path / "out" / "results.jsonl"))
    seen: list[tuple[bool, Any]] = []

    def run_serving(run: ServeRun) -> int:
        seen.append((held_by_another(lock), run.backend.inner._run_lock))
        raise typer.Exit(0)

    monkeypatch.setattr("osmo_run.serve.session.run_serving", run_serving)
    done = _serve(cli, tmp_path, "--spec", _spec(tmp_path), "--task-dir", CALCULATOR_TASK)
    assert done.returncode == 0, done.stderr
    assert seen == [(True, lock)]
    assert not held_by_another(lock)


def test_a_harbor_check_that_fails_before_the_first_rollout_stops_the_server_in_one_line(
    cli: CLI, tmp_path: Path
) -> None:
    """``prepare`` runs as the server starts: a remote environment without credentials
    stops it, exit 2, one ``error:`` line, nothing left running."""
    require_extra("harbor", "harbor")
    from tests.conftest import cli_env

    env = {k: v for k, v in cli_env().items() if not k.startswith("DAYTONA_")}
    output = tmp_path / "out" / "results.jsonl"
    done = cli(
        "serve", "--spec", _spec(tmp_path), "--task-dir", CALCULATOR_TASK, "--env", "daytona",
        "--port", "0", "--display", "plain", "-o", output, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "DAYTONA_API_KEY" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert "listening on" not in done.stderr


def test_a_second_server_on_the_same_output_is_refused_before_it_touches_the_results(
    cli: CLI, tmp_path: Path, served: list[ServeRun]
) -> None:
    """One live invocation per run, the local backend's too: a server on an --output another
    live process holds is refused in one line, and even with --overwrite the results it
    would have removed are still there."""
    from osmo_run.run.writing.runfiles import RunPaths
    from osmo_run.run.writing.runlock import run_locked

    results = tmp_path / "out" / "results.jsonl"
    results.parent.mkdir(parents=True)
    results.write_text('{"kept": true}\n')
    with run_locked(RunPaths(results), "serving run"):  # stands for the first server
        done = _serve(cli, tmp_path, "--spec", _spec(tmp_path), "--overwrite")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "results.jsonl" in done.stderr, done.stderr
    assert results.read_text() == '{"kept": true}\n', "the live run's results were removed"
    assert served == []


def test_a_local_server_holds_its_run_lock_while_it_serves(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmo_run.run.writing.runfiles import RunPaths
    from osmo_run.run.writing.runlock import held_by_another, lock_path

    lock = lock_path(RunPaths(tmp_path / "out" / "results.jsonl"))
    seen: list[bool] = []

    def run_serving(run: ServeRun) -> int:
        seen.append(held_by_another(lock))
        raise typer.Exit(0)

    monkeypatch.setattr("osmo_run.serve.session.run_serving", run_serving)
    done = _serve(cli, tmp_path, "--spec", _spec(tmp_path))
    assert done.returncode == 0, done.stderr
    assert seen == [True] and not held_by_another(lock)
