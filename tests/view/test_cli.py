"""``osmo-run view`` on the command line: bad paths are one error line and exit 2, the
server binds where it is told (warning when that is not loopback), Ctrl-C stops it."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from pathlib import Path

from tests.conftest import OSMO_RUN, cli_env
from tests.view.conftest import Runs, osmo_run, start_viewer


def test_a_missing_path_is_one_error_and_exit_2(tmp_path: Path) -> None:
    done = osmo_run("view", tmp_path / "nowhere", "--no-browser", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'nowhere'}: no such run directory, results file or folder"
    ]


def test_a_folder_without_runs_is_one_error_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = osmo_run("view", tmp_path / "empty", "--no-browser", cwd=tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "no osmo-run runs here" in done.stderr and "Traceback" not in done.stderr


def test_a_run_with_an_unreadable_manifest_still_shows(runs: Runs, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(runs.a, run)
    (run / "results.manifest.json").write_text("{not json")
    server = start_viewer(run, cwd=tmp_path)
    try:
        with urllib.request.urlopen(server.url + "/") as response:
            assert "run" in response.read().decode()
    finally:
        server.stop()


def test_export_needs_exactly_one_run(runs: Runs, tmp_path: Path) -> None:
    done = osmo_run("view", runs.folder, "--export", tmp_path / "r.html", cwd=tmp_path)
    assert done.returncode == 2
    assert "take one run" in done.stderr and "hold 2" in done.stderr


def test_a_port_in_use_is_one_error_and_exit_2(runs: Runs, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = osmo_run("view", runs.a, "--no-browser", "--port", str(port), cwd=tmp_path)
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "pass another --port" in done.stderr


def test_another_host_is_served_with_a_warning(runs: Runs, tmp_path: Path) -> None:
    server = start_viewer(runs.a, cwd=tmp_path, extra=("--host", "0.0.0.0"))
    try:
        port = server.url.rsplit(":", 1)[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/") as response:
            assert response.status == 200
    finally:
        server.stop()
    warning = server.stderr.read_text()
    assert "warning: listening on 0.0.0.0: anyone who can reach this address" in warning
    assert server.proc.returncode == 130  # stopped by Ctrl-C, as every osmo-run command


def test_help_lists_view() -> None:
    done = subprocess.run(
        [str(OSMO_RUN), "--help"], capture_output=True, text=True, env=cli_env(), check=False
    )
    assert done.returncode == 0 and " view " in done.stdout
