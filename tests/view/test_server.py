"""The web app's routes through Starlette's TestClient (in process, no socket): what a page
says, the files it serves and the ones it refuses, and its headers."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from osmo_run.view.catalog import Catalog
from osmo_run.view.files import resolve_inside
from osmo_run.view.server import Viewer, allowed_hosts, create_app
from tests.view import records
from tests.view.conftest import MARKUP, Runs, osmo_run, write_spec


@pytest.fixture
def run_copy(runs: Runs, tmp_path: Path) -> Path:
    """Run a, copied (the tests add files to it), with files the viewer must not serve."""
    copy = tmp_path / "runs" / "a"
    shutil.copytree(runs.a, copy)
    (tmp_path / "secret.txt").write_text("outside the run directory")
    (copy / "artifacts" / "ok-00" / "page.html").write_text("<script>alert(1)</script>")
    (copy / "artifacts" / "ok-00" / "drawing.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    )
    (copy / "artifacts" / "ok-00" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (copy / "artifacts" / "ok-00" / "up").symlink_to(tmp_path)
    return copy


@pytest.fixture
def client(run_copy: Path, tmp_path: Path) -> Iterator[TestClient]:
    viewer = Viewer(Catalog.open([run_copy]), tmp_path / "cache")
    app = create_app(viewer, allowed_hosts("127.0.0.1", 8000))
    with TestClient(app, base_url="http://127.0.0.1:8000") as test_client:
        yield test_client


def key_of(client: TestClient) -> str:
    page = client.get("/").text
    start = page.index('href="/runs/') + len('href="/runs/')
    return page[start : page.index('"', start)]


def test_the_run_page_escapes_every_string_from_the_run(client: TestClient) -> None:
    key = key_of(client)
    page = client.get(f"/runs/{key}")
    assert page.status_code == 200
    assert MARKUP not in page.text
    assert "&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;&lt;script&gt;" in page.text
    markup_row = client.get(f"/runs/{key}?q=markup").text
    position = markup_row.split('data-position="')[1].split('"')[0]
    row = client.get(f"/runs/{key}/rows/{position}").text
    assert MARKUP not in row and "&lt;script&gt;window.__pwned=2&lt;/script&gt;" in row
    assert "bad &lt;i&gt;input&lt;/i&gt;" in client.get(f"/runs/{key}?q=bad-value").text


def test_every_page_carries_a_strict_content_security_policy(client: TestClient) -> None:
    page = client.get(f"/runs/{key_of(client)}")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "unsafe-inline" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    "path",
    [
        "..%2f..%2fsecret.txt",
        "%2e%2e/%2e%2e/secret.txt",
        "%2e%2e%2f%2e%2e%2fsecret.txt",
        "artifacts/ok-00/%2e%2e/%2e%2e/%2e%2e/secret.txt",
        "%2fetc%2fpasswd",
        "/etc/passwd",
        "artifacts/ok-00/leak.txt",  # a symlink leading out
        "artifacts/ok-00/up/secret.txt",  # through a symlinked directory
        "artifacts\\ok-00\\notes.txt",
        "artifacts/ok-00/missing.txt",
        "artifacts/ok-00",  # a directory
    ],
)
def test_files_outside_the_run_directory_are_not_found(client: TestClient, path: str) -> None:
    response = client.get(f"/runs/{key_of(client)}/files/{path}")
    assert response.status_code == 404
    assert "outside the run directory" not in response.text


def test_files_inside_are_served_as_text_images_or_downloads(client: TestClient) -> None:
    base = f"/runs/{key_of(client)}/files/artifacts/ok-00"
    text = client.get(f"{base}/notes.txt")
    assert (text.status_code, text.text) == (200, "notes of ok-00\n")
    assert text.headers["content-type"] == "text/plain; charset=utf-8"
    assert text.headers["content-security-policy"].endswith("sandbox")
    assert client.get(f"{base}/plot.png").headers["content-type"] == "image/png"
    for name in ("page.html", "drawing.svg"):
        # markup a workflow wrote is never rendered as a page: text, never text/html
        served = client.get(f"{base}/{name}")
        assert served.headers["content-type"] == "text/plain; charset=utf-8"


def test_resolve_inside_refuses_every_way_out(run_copy: Path) -> None:
    assert resolve_inside(run_copy, "artifacts/ok-00/notes.txt") is not None
    for bad in ["", ".", "..", "../a", "a/../../x", "/etc/passwd", "artifacts/ok-00/leak.txt"]:
        assert resolve_inside(run_copy, bad) is None, bad


def test_another_host_header_is_refused(client: TestClient) -> None:
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 cannot read the runs."""
    response = client.get("/", headers={"host": "evil.example:8000"})
    assert response.status_code == 400


def test_unknown_runs_rows_and_bad_queries_say_what_is_wrong(client: TestClient) -> None:
    key = key_of(client)
    assert client.get("/runs/nope").status_code == 404
    missing = client.get(f"/runs/{key}/rows/999")
    assert missing.status_code == 404 and "has no row at position 999" in missing.text
    bad = client.get(f"/runs/{key}?reward_min=lots")
    assert bad.status_code == 400 and "reward_min: &#39;lots&#39; is not a number" in bad.text
    assert client.get("/no/such/page").status_code == 404


def test_find_redirects_to_a_row_by_id(client: TestClient) -> None:
    key = key_of(client)
    found = client.get(f"/runs/{key}/find?row=boom&sample=0", follow_redirects=False)
    assert found.status_code == 303
    assert "RuntimeError" in client.get(found.headers["location"]).text
    assert client.get(f"/runs/{key}/find?row=nobody").status_code == 404


def test_state_follows_a_growing_file(tmp_path: Path) -> None:
    results = records.write(tmp_path / "live" / "results.jsonl", records.mixed(3))
    viewer = Viewer(Catalog.open([results]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1") as client:
        key = next(iter(viewer.views))
        client.get(f"/runs/{key}")
        assert client.get(f"/runs/{key}/state").json()["count"] == 3
        with open(results, "a", encoding="utf-8") as out:
            out.write(records.line(records.record(3)) + '{"half')
        state = client.get(f"/runs/{key}/state").json()
        assert (state["count"], state["pending"]) == (4, len('{"half'))
        fragment = client.get(f"/runs/{key}?fragment=1").text
        assert fragment.count("<tr data-position") == 4 and 'id="pending-line"' in fragment


def test_runs_in_a_folder_are_found_and_new_ones_appear(runs: Runs, tmp_path: Path) -> None:
    folder = tmp_path / "many"
    shutil.copytree(runs.a, folder / "first")
    viewer = Viewer(Catalog.open([folder]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1") as client:
        assert client.get("/").text.count('class="run-link"') == 1
        shutil.copytree(runs.b, folder / "nested" / "second")
        listing = client.get("/").text
        assert listing.count('class="run-link"') == 2
        assert "/nested/second/results.jsonl" in listing


def test_a_harbor_rows_kept_trial_directory_is_listed_and_shown(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    trial = run_dir / "trials" / "calc__abc"
    (trial / "agent").mkdir(parents=True)
    (trial / "agent" / "osmo-run.log").write_text("workflow started\n<b>not bold</b>\n")
    (tmp_path / "elsewhere").mkdir()
    inside = {**records.record(0, "failure", "infra_error", "setup")}
    inside["backend"] = {"trial_name": "calc__abc", "trial_dir": str(trial)}
    outside = {**records.record(1, "failure", "timeout", "workflow")}
    outside["backend"] = {"trial_dir": str(tmp_path / "elsewhere")}
    results = records.write(run_dir / "results.jsonl", [inside, outside])
    viewer = Viewer(Catalog.open([results]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1") as client:
        key = next(iter(viewer.views))
        page = client.get(f"/runs/{key}/rows/0").text
        assert 'id="trial-files"' in page and "trials/calc__abc/agent/osmo-run.log" in page
        assert "workflow started\n&lt;b&gt;not bold&lt;/b&gt;" in page
        log = client.get(f"/runs/{key}/files/trials/calc__abc/agent/osmo-run.log")
        assert log.status_code == 200 and log.text.startswith("workflow started")
        other = client.get(f"/runs/{key}/rows/1").text
        assert "is outside the run directory" in other and 'id="trial-files"' not in other


def test_a_run_still_being_indexed_shows_a_page_that_reloads_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from osmo_run.view import server
    from osmo_run.view.pages import RunView

    results = records.write(tmp_path / "run" / "results.jsonl", records.mixed(20))
    release = threading.Event()
    real = RunView.refresh

    def slow(self: RunView) -> bool:
        release.wait(30)  # a first build that takes a while
        return real(self)

    monkeypatch.setattr(RunView, "refresh", slow)
    monkeypatch.setattr(server, "INDEX_WAIT_SEC", 0.05)
    viewer = Viewer(Catalog.open([results]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1") as client:
        key = next(iter(viewer.views))
        waiting = client.get(f"/runs/{key}")
        assert waiting.status_code == 200
        assert "Indexing" in waiting.text and 'http-equiv="refresh"' in waiting.text
        assert "indexing…" in client.get("/").text
        release.set()
        assert viewer.views[key].ready.wait(30)
        assert client.get(f"/runs/{key}").text.count("<tr data-position") == 20


def test_compare_links_a_row_whose_id_ends_in_a_tilde_number_to_that_row(
    tmp_path: Path,
) -> None:
    # "q~3" was read as sample 3 of a row "q": the compare page names rows by their ids
    dataset = tmp_path / "d.jsonl"
    ids = ["q~3", "q"]
    rows = [{"id": row_id, "prompt": "2+2?", "label": "4"} for row_id in ids]
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
    for name, rewards in (("a", {}), ("b", {"q~3": 0.0})):
        spec = write_spec(tmp_path / f"{name}.yaml", {}, {"rewards": rewards})
        out = tmp_path / "runs" / name / "results.jsonl"
        done = osmo_run("local", dataset, "--spec", spec, "-o", out, "--plain", cwd=tmp_path)
        assert done.returncode in (0, 1), done.stdout + done.stderr
    viewer = Viewer(Catalog.open([tmp_path / "runs"]), tmp_path / "cache")
    app = create_app(viewer, allowed_hosts("127.0.0.1", 8000))
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        keys = {
            entry.paths.results.parent.name: entry.key for entry in viewer.catalog.runs.values()
        }
        page = client.get(f"/compare?a={keys['a']}&b={keys['b']}").text
        link = f"/runs/{keys['b']}/find?row=q~3&amp;sample=0"
        assert link in page, page[page.find("<main") :]
        found = client.get(link.replace("&amp;", "&"), follow_redirects=False)
        assert found.status_code in (302, 303, 307), found.text
        row = client.get(found.headers["location"]).text
        assert "q~3" in row


def _live_copy(runs: Runs, folder: Path, rows: int, results_name: str = "results.jsonl") -> Path:
    """A run being written under ``folder``: run a's manifest and its first ``rows`` lines."""
    folder.mkdir(parents=True)
    stem = results_name.removesuffix(".jsonl")
    shutil.copyfile(runs.a / "results.manifest.json", folder / f"{stem}.manifest.json")
    lines = (runs.a / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    results = folder / results_name
    results.write_text("".join(lines[:rows]), encoding="utf-8")
    return results


def test_the_runs_list_state_follows_rows_appended_to_a_live_run(
    runs: Runs, tmp_path: Path
) -> None:
    """The runs list polls /state and refreshes while it differs from what it shows: /state
    must see rows appended since (it read an index nothing refreshed, so the list froze)."""
    results = _live_copy(runs, tmp_path / "live", 5)
    viewer = Viewer(Catalog.open([tmp_path / "live"]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1:8000") as client:
        page = client.get("/").text
        shown = page.split('data-shown-state="')[1].split('"')[0].replace("&#34;", '"')
        assert client.get("/state").text == shown  # nothing changed: no refresh
        lines = (runs.a / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
        with open(results, "a", encoding="utf-8") as out:
            out.write("".join(lines[5:9]))
        state = json.loads(client.get("/state").text)
        assert [v["count"] for v in state.values()] == [9]
        assert client.get("/state").text != shown
        assert '<td class="num">9<span class="muted"> / 16' in client.get("/").text


def test_a_run_started_again_with_overwrite_shows_its_new_start(runs: Runs, tmp_path: Path) -> None:
    _live_copy(runs, tmp_path / "run", 16)
    viewer = Viewer(Catalog.open([tmp_path / "run"]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1:8000") as client:
        manifest_path = tmp_path / "run" / "results.manifest.json"
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        manifest["info"]["written_at"] = "2031-02-03T04:05:06+00:00"
        manifest_path.write_text(json.dumps(manifest), encoding="utf-8")  # --overwrite's
        assert "2031-02-03 04:05" in client.get("/").text


def test_a_run_written_to_an_output_without_extension_is_found(runs: Runs, tmp_path: Path) -> None:
    """``--output DIR/example`` writes ``example`` and ``example.manifest.json``."""
    _live_copy(runs, tmp_path / "runs" / "x", 16, results_name="example")
    catalog = Catalog.open([tmp_path / "runs"])
    assert [e.paths.results.name for e in catalog.runs.values()] == ["example"]


def test_a_run_without_a_grader_says_no_grader_not_reward_zero(tmp_path: Path) -> None:
    results = records.write(
        tmp_path / "nograder" / "results.jsonl",
        [records.record(i, reward=None) for i in range(4)],
    )
    viewer = Viewer(Catalog.open([results]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1:8000") as client:
        listing = client.get("/").text
        assert 'no-grader" colspan="2">no grader</td>' in listing
        key = key_of(client)
        page = client.get(f"/runs/{key}").text
        assert page.count('<span class="no-grader">no grader</span>') == 2
        assert "0.0 %" not in page
        assert '<td class="why">no grader</td>' in page


def test_compare_with_three_samples_per_row_lists_no_unchanged_row_and_uses_rates(
    runs: Runs, tmp_path: Path
) -> None:
    """B is run a with every row sampled three times, each sample as a's one: nothing
    changed. The page listed unchanged rows as changes (None -> 0.0), did not name the
    samples per row, and compared raw error counts (4 -> 12); it now shows rates and the
    paired test, which cannot tell anything from noise."""
    folder = tmp_path / "runs"
    shutil.copytree(runs.a, folder / "a")
    (folder / "b").mkdir()
    manifest = json.loads((runs.a / "results.manifest.json").read_text(encoding="utf-8"))
    manifest["defining"]["samples_per_row"] = 3
    (folder / "b" / "results.manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    tripled = []
    for text in (runs.a / "results.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(text)
        for sample in range(3):
            tripled.append({**record, "sample_index": sample})
    records.write(folder / "b" / "results.jsonl", tripled)
    viewer = Viewer(Catalog.open([folder]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1:8000") as client:
        keys = sorted(viewer.catalog.runs, key=lambda k: str(viewer.catalog.runs[k].paths))
        page = client.get(f"/compare?a={keys[0]}&b={keys[1]}").text
        assert "no reward changed" in page and 'id="reward-deltas"' not in page
        assert 'id="compare-samples">A 1 · B 3' in page
        assert 'id="compare-rollouts">A 16 · B 48' in page
        assert "1 of 48 (2.1%)" not in page and "3 of 48 (6.2%) (+0.0 points)" in page
        assert "(+2)" not in page  # rate_limit 1 -> 3 is no change
        assert 'data-metric="pass rate"' in page and "cannot tell that from noise" not in page
        assert "within --max-regression 0" in page


def test_a_search_finds_failed_rollouts_by_their_prompt(client: TestClient) -> None:
    """A failed rollout has no sample: its prompt is only in the dataset, which the search
    reads back (the README says prompts are searched)."""
    key = key_of(client)
    page = client.get(f"/runs/{key}?q=FAIL&per_page=200").text
    shown = sorted(p.split('"')[0] for p in page.split('data-row="')[1:])
    assert shown == ["bad-value", "boom", "limited"]
