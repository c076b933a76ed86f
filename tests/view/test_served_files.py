"""What ``/runs/KEY/files/...`` serves: only what the run recorded (the artifacts of its
rollouts, its own summary, manifest, attempts and error files, its kept trial directories),
never a dot-file, never a file beside the results that the run did not write, never a path
that leaves through a symlink; and the row page finds artifacts under the rollout's safe
name, as the runner writes them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from weakref import WeakKeyDictionary

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from osmo_run.view.catalog import Catalog
from osmo_run.view.server import Viewer, allowed_hosts, create_app
from tests.view import records
from tests.view.conftest import Runs, osmo_run, write_spec

SECRET = "OPENAI_API_KEY=sk-secret-of-the-project-0123456789"


@pytest.fixture
def project(runs: Runs, tmp_path: Path) -> Path:
    """A project directory where ``osmo-run local ... --output results.jsonl`` wrote run a,
    beside the project's own files (``.env``, ``.git``, notes) and some traps."""
    root = tmp_path / "project"
    shutil.copytree(runs.a, root)
    (root / ".env").write_text(SECRET + "\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text(f"[remote]\n\turl = https://x:{SECRET}@example\n")
    (root / "notes.md").write_text(f"project notes {SECRET}\n")
    (root / "artifacts" / "ok-00" / ".hidden").write_text(SECRET)
    (root / "artifacts" / "stray").mkdir()
    (root / "artifacts" / "stray" / "x.txt").write_text(SECRET)  # no rollout of that name
    (root / "artifacts" / "ok-00" / "env-link.txt").symlink_to(root / ".env")
    (root / "artifacts" / "ok-00" / "notes-link.txt").symlink_to(root / "notes.md")
    (tmp_path / "outside.txt").write_text(SECRET)
    (root / "artifacts" / "ok-00" / "out-link.txt").symlink_to(tmp_path / "outside.txt")
    (root / "artifacts" / "ok-00" / "up").symlink_to(tmp_path)
    (root / "errors").mkdir()
    (root / "errors" / "boom.txt").write_text("the full error of boom\n")
    (root / "errors" / "nobody.txt").write_text(SECRET)
    return root


@pytest.fixture
def client(project: Path, tmp_path: Path) -> Iterator[TestClient]:
    viewer = Viewer(Catalog.open([project / "results.jsonl"]), tmp_path / "cache")
    app = create_app(viewer, allowed_hosts("127.0.0.1", 8000))
    with TestClient(app, base_url="http://127.0.0.1:8000") as test_client:
        yield test_client


def files_url(client: TestClient) -> str:
    page = client.get("/").text
    start = page.index('href="/runs/') + len('href="/runs/')
    key = page[start : page.index('"', start)]
    return f"/runs/{key}/files/"


@pytest.mark.parametrize(
    "path",
    [
        ".env",  # a dot-file beside the results
        ".git/config",  # inside a dot-directory
        "%2eenv",  # the dot percent-encoded
        ".git%2fconfig",  # the slash percent-encoded
        "notes.md",  # beside the results, not written by the run
        "results.jsonl",  # the results file itself: the pages show it
        "artifacts/ok-00/.hidden",  # a dot-file among a rollout's artifacts
        "artifacts/stray/x.txt",  # an artifacts folder of no rollout in the results
        "artifacts/ok-00/env-link.txt",  # a symlink to a dot-file inside
        "artifacts/ok-00/notes-link.txt",  # a symlink to a file the run did not write
        "artifacts/ok-00/out-link.txt",  # a symlink leaving the run directory
        "artifacts/ok-00/up/outside.txt",  # through a symlinked directory
        "artifacts/ok-00/../../.env",
        "artifacts/ok-00/%2e%2e/%2e%2e/.env",
        "artifacts%2fok-00%2f%2e%2e%2f%2e%2e%2f.env",
        "..%2foutside.txt",
        "%2e%2e%2foutside.txt",
        "/etc/passwd",
        "%2fetc%2fpasswd",
        "artifacts/ok-00/notes.txt%00.png",  # a NUL
        "errors/nobody.txt",  # an error file of no rollout in the results
    ],
)
def test_only_files_the_run_recorded_are_served(client: TestClient, path: str) -> None:
    response = client.get(files_url(client) + path)
    assert response.status_code == 404, response.text
    assert SECRET not in response.text


def test_the_runs_own_files_and_its_rollouts_artifacts_are_served(client: TestClient) -> None:
    base = files_url(client)
    assert client.get(base + "artifacts/ok-00/notes.txt").text == "notes of ok-00\n"
    assert client.get(base + "artifacts/ok-00/plot.png").headers["content-type"] == "image/png"
    assert client.get(base + "errors/boom.txt").text == "the full error of boom\n"
    summary = client.get(base + "results.summary.json")
    assert summary.status_code == 200 and json.loads(summary.text)["total"] == 16
    assert client.get(base + "results.manifest.json").status_code == 200


def test_the_row_page_lists_no_file_it_would_refuse(client: TestClient) -> None:
    base = files_url(client)
    key = base.split("/")[2]
    position = client.get(f"/runs/{key}?q=ok-00").text.split('data-position="')[1].split('"')[0]
    page = client.get(f"/runs/{key}/rows/{position}").text
    assert "artifacts/ok-00/notes.txt" in page
    for refused in (".hidden", "env-link.txt", "notes-link.txt", "out-link.txt", "up/"):
        assert refused not in page, refused
    assert SECRET not in page


def test_a_kept_trial_directory_of_a_record_is_served_and_others_are_not(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for trial in ("calc__abc", "other__xyz"):
        (run_dir / "trials" / trial).mkdir(parents=True)
        (run_dir / "trials" / trial / "log.txt").write_text(f"log of {trial}\n")
    row = records.record(0, "failure", "infra_error", "setup")
    row["backend"] = {"trial_dir": str(run_dir / "trials" / "calc__abc")}
    results = records.write(run_dir / "results.jsonl", [row])
    viewer = Viewer(Catalog.open([results]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1") as client:
        base = f"/runs/{next(iter(viewer.views))}/files/trials/"
        assert client.get(base + "calc__abc/log.txt").text == "log of calc__abc\n"
        assert client.get(base + "other__xyz/log.txt").status_code == 404


TRICKY_IDS = ["Upper-1", "gsm8k/train/17", "../../escape", "sp ace", "ünï"]


def test_row_pages_show_artifacts_of_rows_whose_ids_are_not_file_names(tmp_path: Path) -> None:
    dataset = tmp_path / "tricky.jsonl"
    rows = [
        {"id": row_id, "user_prompt": "2+2?", "label": "4", "metadata": {"artifacts": True}}
        for row_id in TRICKY_IDS
    ]
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = write_spec(tmp_path / "spec.yaml", {}, {})
    out = tmp_path / "run" / "results.jsonl"
    for samples in ("1", "2"):
        target = out.with_name(f"results-{samples}.jsonl")
        done = osmo_run(
            "local", dataset, "--spec", spec, "-o", target, "--samples", samples, "--plain",
            cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        viewer = Viewer(Catalog.open([target]), tmp_path / f"cache-{samples}")
        with TestClient(create_app(viewer), base_url="http://127.0.0.1") as client:
            key = next(iter(viewer.views))
            count = len(TRICKY_IDS) * int(samples)
            for position in range(count):
                page = client.get(f"/runs/{key}/rows/{position}")
                assert page.status_code == 200
                assert 'id="artifacts"' in page.text, position
                link = page.text.split(f'href="/runs/{key}/files/artifacts/')[1].split('"')[0]
                served = client.get(f"/runs/{key}/files/artifacts/{link}")
                assert served.status_code == 200 and served.text.startswith("notes of ")


_SEGMENTS = [
    ".env", ".git", "config", "..", ".", "%2e", "%2e%2e", "%2f", "%00", "%5c", "%ED%A0%80",
    "%FF", "~", "artifacts", "ok-00", "boom", "notes.txt", "env-link.txt", "up", "stray",
    "outside.txt", "errors", "boom.txt", "results.summary.json", "results.jsonl", "notes.md",
    "x" * 300,
]  # fmt: skip
SERVABLE = {
    "artifacts/ok-00/notes.txt",
    "artifacts/ok-00/plot.png",
    "errors/boom.txt",
    "results.summary.json",
    "results.manifest.json",
}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    parts=st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=6),
    separators=st.lists(st.sampled_from(["/", "%2f", "%2F", "//"]), min_size=6, max_size=6),
)
def test_no_requested_path_serves_a_file_the_run_did_not_record(
    client: TestClient, parts: list[str], separators: list[str]
) -> None:
    path = "".join(part + separator for part, separator in zip(parts, separators, strict=False))
    path = path[: -len(separators[len(parts) - 1])]
    if client not in _BASES:
        _BASES[client] = files_url(client)
    base = _BASES[client]
    response = client.get(base + path)
    assert response.status_code in (200, 404), path
    assert SECRET not in response.text, path
    if response.status_code == 200 and "/files/" in str(response.url):  # ".." went up: a page
        assert response.content in _servable_contents(client, base), path


_BASES: WeakKeyDictionary[TestClient, str] = WeakKeyDictionary()
_CONTENTS: WeakKeyDictionary[TestClient, set[bytes]] = WeakKeyDictionary()


def _servable_contents(client: TestClient, base: str) -> set[bytes]:
    """What the files the run recorded hold: a 200 answer must be one of them."""
    if client not in _CONTENTS:
        _CONTENTS[client] = {client.get(base + path).content for path in SERVABLE}
    return _CONTENTS[client]


def test_a_recorded_safe_name_that_is_a_path_names_no_artifacts(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "artifacts").mkdir(parents=True)
    (run_dir / "notes.md").write_text(SECRET)
    (run_dir / ".git").mkdir()
    (run_dir / ".git" / "config").write_text(SECRET)
    hostile = []
    for i, name in enumerate(["..", "../..", ".git", "a/../..", "/etc", ""]):
        row = records.record(i)
        row["safe_name"] = name
        hostile.append(row)
    results = records.write(run_dir / "results.jsonl", hostile)
    viewer = Viewer(Catalog.open([results]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1") as client:
        key = next(iter(viewer.views))
        for position in range(len(hostile)):
            page = client.get(f"/runs/{key}/rows/{position}")
            assert page.status_code == 200 and 'id="artifacts"' not in page.text
            assert SECRET not in page.text
        for path in ("artifacts/../notes.md", "artifacts/%2e%2e/notes.md", "artifacts/.git/config"):
            assert client.get(f"/runs/{key}/files/{path}").status_code == 404


@pytest.mark.parametrize("trial_dir", ["\x00", "trials/\x00x", "", ".", "/", "..", "x" * 5000])
def test_a_recorded_trial_directory_that_is_no_path_shows_the_row(
    tmp_path: Path, trial_dir: str
) -> None:
    row = records.record(0, "failure", "infra_error", "setup")
    row["backend"] = {"trial_dir": trial_dir}
    results = records.write(tmp_path / "run" / "results.jsonl", [row])
    viewer = Viewer(Catalog.open([results]), tmp_path / "cache")
    app = create_app(viewer)
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        key = next(iter(viewer.views))
        page = client.get(f"/runs/{key}/rows/0")
        assert page.status_code == 200 and 'id="trial-files"' not in page.text
