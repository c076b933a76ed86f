"""``osmo-run view`` in real headless Chromium, over runs made with ``osmo-run local``: what a
person sees on each page, the clicks they make, and the export opened from ``file://``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.view.conftest import (
    MARKUP,
    Runs,
    Viewer,
    osmo_run,
    screenshot,
    start_viewer,
    wait_until,
)


def rows_shown(page: Any) -> list[dict[str, str]]:
    """The visible lines of the rows table, as a person reads them."""
    return page.eval_on_selector_all(
        "#rows-table tbody tr:not([hidden])",
        """rows => rows.map(r => ({
            id: r.querySelector('a.row-link').textContent,
            status: r.dataset.status,
            category: r.dataset.category,
        }))""",
    )


LIVE_SEC = 90.0
"""Ceiling for a live page to show what was appended: it polls every 1.5 s, but a busy
2-core CI box can hold the browser and the server for many seconds."""


def open_run(page: Any, viewer: Viewer, name: str) -> None:
    page.goto(viewer.url + "/")
    page.click(f"#runs-table tr:has(.muted:text-matches('/{name}/')) a.run-link")
    page.wait_for_selector("#rows-table")


def test_runs_list_shows_each_run_with_its_numbers(viewer: Viewer, page: Any) -> None:
    page.goto(viewer.url + "/")
    lines = page.locator("#runs-table tbody tr")
    assert lines.count() == 2
    text = page.inner_text("#runs-table")
    assert "finished" in text and "local" in text and "calc" in text
    assert "success 13" in text and "failure 3" in text  # run a
    assert "success 12" in text and "failure 4" in text  # run b: ok-03 fails there
    screenshot(page, "runs")


def test_run_page_filters_to_one_error_category(viewer: Viewer, page: Any) -> None:
    open_run(page, viewer, "a")
    assert len(rows_shown(page)) == 16
    bars = page.eval_on_selector_all(
        "#chart-categories .bar-row", "gs => gs.map(g => g.dataset.label)"
    )
    assert sorted(bars) == ["agent_error", "rate_limit", "validation_error"]
    assert page.locator("#chart-rewards .bar-row").count() == 3  # rewards 0, 0.5 and 1
    screenshot(page, "run")

    page.select_option("select[name=category]", "agent_error")
    page.click("#filters button[type=submit]")
    page.wait_for_load_state("load")
    assert rows_shown(page) == [{"id": "boom", "status": "failure", "category": "agent_error"}]
    assert "1 of 16 rollouts match" in page.inner_text("#match-count")

    # a chart bar is a filter too
    page.click("#chart-categories .bar-row[data-label=rate_limit]")
    page.wait_for_load_state("load")
    assert [r["id"] for r in rows_shown(page)] == ["limited"]


def test_row_page_shows_the_transcript_as_a_conversation(viewer: Viewer, page: Any) -> None:
    open_run(page, viewer, "a")
    page.click("a.row-link:text-is('ok-00')")
    page.wait_for_selector("#transcript")
    roles = page.eval_on_selector_all("#transcript .turn", "ts => ts.map(t => t.dataset.role)")
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    call = page.inner_text("#transcript .call")
    assert "calculator" in call and '"expression": "2+2"' in call
    assert "result of calculator" in page.inner_text("#transcript .turn.tool .who").lower()
    assert page.inner_text("pre.label") == "2"  # from the dataset: the workflow never saw it
    assert "notes of ok-00" in page.inner_text("#artifacts")
    width = page.eval_on_selector("#artifacts img", "img => img.naturalWidth")
    assert width == 4  # the PNG the workflow wrote, served from the run directory
    screenshot(page, "row")

    page.goto(viewer.url + "/")
    open_run(page, viewer, "a")
    page.click("a.row-link:text-is('limited')")
    page.wait_for_selector("#row-error")
    assert "rate_limit" in page.inner_text("#row-error")
    assert page.locator("#attempts tbody tr").count() == 2  # two earlier tries, then this one


def test_the_why_column_finds_a_wrong_answer_in_one_click(viewer: Viewer, page: Any) -> None:
    """A wrong answer is a green ``success`` row with reward below the pass threshold: it is
    marked "not passing", one click on the status chart lists such rows, and the grader's
    reason stands beside the result in the table and at the top of the row page."""
    open_run(page, viewer, "a")
    page.click("#chart-status .bar-row[data-label='not passing']")
    page.wait_for_load_state("load")
    shown = rows_shown(page)
    assert shown and all(r["status"] == "success" for r in shown)
    assert [r["id"] for r in shown][:2] == ["ok-01", "ok-02"]  # rewards 0.5 and 0
    assert "not passing" in page.inner_text("#rows-table tbody tr:first-child")
    why = page.inner_text("#rows-table tbody tr:first-child td.why")
    assert why == "the answer is not the label: reward 0.5 · label: 3"
    assert page.locator("select[name=passing]").input_value() == "no"
    screenshot(page, "why")

    page.click("a.row-link:text-is('ok-02')")
    page.wait_for_selector("#row-why")
    top = page.inner_text("#row-why")
    assert "not passing" in top and "the answer is not the label: reward 0 · label: 4" in top
    box = page.locator("#row-why").bounding_box()
    assert box is not None and box["y"] < 400  # beside the result, not under the transcript

    open_run(page, viewer, "a")
    failed = page.inner_text("#rows-table tr:has(a.row-link:text-is('boom')) td.why")
    assert failed.startswith("agent_error: ")


def test_keyboard_and_row_pages_stay_in_the_filtered_list(viewer: Viewer, page: Any) -> None:
    """From a filtered list, a row page's previous/next follow that list, and back (or Esc)
    returns to it with its filters; j/k and Enter open rows, "/" searches, a search with
    no result says so, forms leave empty fields out of the URL, and a page past the last
    shows the last."""
    open_run(page, viewer, "a")
    # A key that opens a page starts its navigation only when the page's handler runs: wait
    # for that navigation to load (expect_navigation), never for the current page's state.
    with page.expect_navigation():
        page.click("#quick-not-passing")
    assert page.url.endswith("?passing=no#rows")
    listed = [r["id"] for r in rows_shown(page)]
    assert len(listed) == 8  # rewards 0.5 and 0 of ok-00..ok-11

    page.keyboard.press("j")
    page.keyboard.press("j")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.inner_text("h1") == listed[1]
    assert page.inner_text("#row-place") == "2 of 8 matching"
    with page.expect_navigation():
        page.keyboard.press("ArrowRight")
    assert page.inner_text("h1") == listed[2]  # the next in the list, not in the file
    with page.expect_navigation():
        page.click("#next-row")
    assert page.inner_text("h1") == listed[3]
    with page.expect_navigation():
        page.keyboard.press("Escape")
    assert "passing=no" in page.url
    assert page.inner_text("#match-count").startswith("8 of 16 rollouts match")

    page.keyboard.press("/")
    page.wait_for_function("document.activeElement && document.activeElement.name === 'q'")
    page.keyboard.type("no such text anywhere")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "no rows match the search “no such text anywhere”" in page.inner_text("#no-match")
    query = page.url.split("?", 1)[1].split("#")[0]
    assert sorted(p.split("=")[0] for p in query.split("&")) == ["passing", "q"]

    page.goto(page.url.split("?")[0] + "?page=99")
    assert page.inner_text("#match-count").endswith("page 1 of 1")
    assert len(rows_shown(page)) == 16


def test_a_transcript_reads_as_a_conversation_markdown_folded_and_numbered(
    viewer: Viewer, page: Any
) -> None:
    """Markdown rendered (raw HTML stays off: see the markup payload test), tool output
    monospaced and a long one collapsed, reasoning collapsed, empty fields left out, turns
    numbered, a tool turn's header naming its call once, timings in units."""
    open_run(page, viewer, "a")
    page.click("a.row-link:text-is('ok-01')")
    page.wait_for_selector("#transcript")
    answer = "#transcript .turn.assistant:last-child .text.md"
    assert page.inner_text(f"{answer} strong") == "3"
    assert page.inner_text(f"{answer} pre code").strip() == "1 + 2 = 3"
    assert page.locator(f"{answer} a").count() == 0  # a javascript: link stays text
    who = page.inner_text("#transcript .turn.tool .who")
    assert (
        who.lower().startswith("#4 tool · result of calculator")
        and who.lower().count("calculator") == 1
    )
    fold = page.locator("#transcript .turn.tool details.fold")
    assert fold.count() == 1 and fold.get_attribute("open") is None
    assert "40 lines" in page.inner_text("#transcript .turn.tool summary")
    page.click("#transcript .turn.tool summary")
    output = page.locator("#transcript .turn.tool pre.tool-output")
    assert output.is_visible() and "line 39" in output.inner_text()
    family = output.evaluate("e => getComputedStyle(e).fontFamily")
    assert "mono" in family.lower()
    reasoning = page.locator("#transcript details.reasoning")
    assert reasoning.count() == 1 and reasoning.get_attribute("open") is None
    assert "First I add" not in reasoning.inner_text()  # collapsed: its summary shows
    page.click("#transcript details.reasoning summary")
    assert "First I add" in reasoning.inner_text()
    assert page.locator("#transcript details:has-text('more fields')").count() == 0
    timings = page.inner_text(".card:has(h3:text-is('timings'))")
    assert "e-0" not in timings and ("ms" in timings or "µs" in timings)
    screenshot(page, "transcript")


def test_a_markup_payload_renders_as_text(viewer: Viewer, page: Any) -> None:
    open_run(page, viewer, "a")
    previews = page.eval_on_selector_all("td.preview", "cells => cells.map(c => c.textContent)")
    assert MARKUP in previews
    page.click("a.row-link:text-is('markup')")
    page.wait_for_selector("#transcript")
    answers = page.eval_on_selector_all(
        "#transcript .turn.assistant .text", "ts => ts.map(t => t.textContent)"
    )
    assert answers[-1] == MARKUP
    assert page.inner_text("#transcript .turn.user .text") == "Say <b>bold</b>"
    assert page.locator("#transcript img, #transcript script, #transcript b").count() == 0
    assert page.evaluate("window.__pwned") is None

    page.goto(viewer.url + "/")
    open_run(page, viewer, "a")
    page.click("a.row-link:text-is('bad-value')")
    assert "bad <i>input</i>" in page.inner_text("#row-error .error-message")
    assert page.evaluate("window.__pwned") is None


def test_compare_view_lists_what_changed_with_links(viewer: Viewer, page: Any, runs: Runs) -> None:
    page.goto(viewer.url + "/")  # the runs list shows each run's path, so which key is which
    key_of = {
        name: page.get_attribute(
            f"#runs-table tr:has(.muted:text-matches('/{name}/')) a.run-link", "href"
        ).rsplit("/", 1)[1]
        for name in ("a", "b")
    }
    a_key, b_key = key_of["a"], key_of["b"]
    page.goto(viewer.url + "/compare")
    page.select_option("select[name=a]", a_key)
    page.select_option("select[name=b]", b_key)
    page.click("form button[type=submit]")
    page.wait_for_selector("#now-passing")
    assert page.inner_text("#compare-rows").startswith("16 in both")
    passing = page.eval_on_selector_all(
        "#now-passing a:not(.side-link)", "as => as.map(a => a.textContent)"
    )
    failing = page.eval_on_selector_all(
        "#now-failing a:not(.side-link)", "as => as.map(a => a.textContent)"
    )
    assert passing == ["ok-02"] and failing == ["ok-03"]
    assert page.locator("#chart-compare .bar-row[data-label='agent_error · B']").count() == 1
    test = page.inner_text("#compare-test")
    assert "pass rate" in test and "exact McNemar: 1 rows now failing, 1 now passing" in test
    assert "mean reward" in test and "95 % CI" in test

    # a row's transcripts in A and B, side by side
    page.click("#now-failing a.side-link")
    page.wait_for_selector("#side-by-side")
    assert page.inner_text("h1").startswith("ok-03")
    assert page.locator("#side-a #transcript, #side-a .transcript .turn").count() == 5
    assert "failure" in page.inner_text("#side-b") and "fails in this run" in page.inner_text(
        "#side-b .why"
    )
    left = page.locator("#side-a").bounding_box()
    right = page.locator("#side-b").bounding_box()
    assert left is not None and right is not None and left["x"] < right["x"]
    assert abs(left["y"] - right["y"]) < 2  # beside each other, not one under the other
    screenshot(page, "compare-row")
    page.go_back()
    page.wait_for_selector("#now-failing")
    screenshot(page, "compare")

    page.click("#now-failing a")
    page.wait_for_selector("#row-error")
    assert "ok-03 fails in this run" in page.inner_text("#row-error")
    assert "/runs/" + b_key + "/rows/" in page.url


def test_a_run_being_written_updates_without_reloading(
    runs: Runs, tmp_path: Path, page: Any
) -> None:
    source = runs.a / "results.jsonl"
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    live = tmp_path / "live"
    live.mkdir()
    shutil.copyfile(runs.a / "results.manifest.json", live / "results.manifest.json")
    results = live / "results.jsonl"
    results.write_text("".join(lines[:5]), encoding="utf-8")  # no summary yet: being written
    server = start_viewer(live, cwd=tmp_path)
    try:
        page.goto(server.url + "/")
        assert "live" in page.inner_text("#runs-table")
        page.click("a.run-link")
        page.wait_for_selector("#rows-table")
        assert "5 of 5 rollouts" in page.inner_text("#match-count")
        page.evaluate("window.__same_page = true")

        with open(results, "a", encoding="utf-8") as out:
            out.write("".join(lines[5:9]))
            out.write(lines[9][:40])  # a row half written
        # the page polls; CSP forbids wait_for_function's eval, so poll from here
        wait_until(lambda: page.inner_text("#match-count").startswith("9 of 9"), LIVE_SEC, "9 of 9")
        page.wait_for_selector("#pending-line")
        assert page.evaluate("window.__same_page") is True  # updated in place, not reloaded
        screenshot(page, "live")

        with open(results, "a", encoding="utf-8") as out:
            out.write(lines[9][40:])
            out.write("this line is not JSON\n")
        # the page polls; CSP forbids wait_for_function's eval, so poll from here
        wait_until(
            lambda: page.inner_text("#match-count").startswith("10 of 10"), LIVE_SEC, "10 of 10"
        )
        page.wait_for_selector("#bad-lines")
        assert "line 11: not JSON" in page.inner_text("#bad-lines")
        assert page.locator("#pending-line").count() == 0
    finally:
        server.stop()


def test_the_runs_list_and_run_page_follow_a_live_run_until_it_finishes(
    runs: Runs, tmp_path: Path, page: Any
) -> None:
    """The runs list's counts grow while a run writes (its poll used to read an index it
    never refreshed, so the list stayed at the first count until the run finished), and a
    run page's title badge turns from "live" to "finished" without a reload."""
    source = runs.a / "results.jsonl"
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    live = tmp_path / "live"
    live.mkdir()
    shutil.copyfile(runs.a / "results.manifest.json", live / "results.manifest.json")
    results = live / "results.jsonl"
    results.write_text("".join(lines[:5]), encoding="utf-8")
    server = start_viewer(live, cwd=tmp_path)

    def rollouts_in_list() -> str:
        return str(page.inner_text("#runs-table tbody tr td:nth-child(6)")).split("/")[0].strip()

    try:
        page.goto(server.url + "/")
        wait_until(lambda: rollouts_in_list() == "5", LIVE_SEC, "5 rollouts in the list")
        page.evaluate("window.__same_page = true")
        with open(results, "a", encoding="utf-8") as out:
            out.write("".join(lines[5:9]))
        wait_until(lambda: rollouts_in_list() == "9", LIVE_SEC, "9 rollouts in the list")
        assert "live" in page.inner_text("#runs-table")
        assert page.evaluate("window.__same_page") is True

        page.click("a.run-link")
        page.wait_for_selector("#rows-table")
        assert page.inner_text("h1 .badge") == "live"
        page.evaluate("window.__same_page = true")
        with open(results, "a", encoding="utf-8") as out:
            out.write("".join(lines[9:]))
        shutil.copyfile(runs.a / "results.summary.json", live / "results.summary.json")
        wait_until(lambda: page.inner_text("h1 .badge") == "finished", LIVE_SEC, "finished")
        assert page.inner_text("#match-count").startswith("16 of 16")
        assert page.evaluate("window.__same_page") is True
        page.go_back()
        wait_until(lambda: "finished" in page.inner_text("#runs-table"), LIVE_SEC, "finished")
        assert rollouts_in_list() == "16"
    finally:
        server.stop()


def test_a_live_page_catches_up_when_its_first_poll_answers_after_a_change(
    runs: Runs, tmp_path: Path, page: Any
) -> None:
    """On a busy machine the page's first poll can be answered after rows were appended:
    the page must still show them (it compared later polls with that first answer, not
    with what it showed, and stayed at 5 rows)."""
    source = runs.a / "results.jsonl"
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    live = tmp_path / "live"
    live.mkdir()
    shutil.copyfile(runs.a / "results.manifest.json", live / "results.manifest.json")
    results = live / "results.jsonl"
    results.write_text("".join(lines[:5]), encoding="utf-8")
    server = start_viewer(live, cwd=tmp_path)
    held: list[Any] = []

    def hold(route: Any) -> None:
        held.append(route)

    try:
        page.route("**/runs/*/state", hold)  # hold the run page's polls
        page.goto(server.url + "/")
        page.click("a.run-link")
        page.wait_for_selector("#rows-table")
        assert "5 of 5 rollouts" in page.inner_text("#match-count")
        # the page's first poll is on its way (playwright delivers it while we wait)
        wait_until(lambda: bool(page.wait_for_timeout(50) or held), LIVE_SEC, "the first poll")
        with open(results, "a", encoding="utf-8") as out:
            out.write("".join(lines[5:9]))
        held[0].continue_()  # answered now: it already sees 9 rows
        page.unroute("**/runs/*/state", hold)  # the next polls go through
        wait_until(lambda: page.inner_text("#match-count").startswith("9 of 9"), LIVE_SEC, "9 of 9")
    finally:
        server.stop()


def test_the_export_works_from_a_file_url(runs: Runs, tmp_path: Path, page: Any) -> None:
    report = tmp_path / "report.html"
    done = osmo_run("view", runs.a, "--export", report, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "transcripts of all 3 failed and all 13 others" in done.stdout
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(report.as_uri())
    assert len(rows_shown(page)) == 16
    page.select_option("select[name=category]", "agent_error")
    assert [r["id"] for r in rows_shown(page)] == ["boom"]
    page.select_option("select[name=category]", "")
    page.fill("input[name=q]", "What is 7+2")
    assert [r["id"] for r in rows_shown(page)] == ["ok-07"]
    page.fill("input[name=q]", "")
    page.click("#chart-categories .bar-row[data-label=rate_limit]")
    assert [r["id"] for r in rows_shown(page)] == ["limited"]
    page.click("#filters button[type=reset]")
    page.click("#rows-table th[data-sort=attempt]")
    page.click("#rows-table th[data-sort=attempt]")  # again: most tries first
    assert rows_shown(page)[0]["id"] == "limited"
    page.click("#rows-table th[data-sort=line]")
    screenshot(page, "export")

    page.click("a.row-link:text-is('ok-00')")
    section = page.locator("#row-0")
    assert section.is_visible()
    roles = section.evaluate("s => [...s.querySelectorAll('.turn')].map(t => t.dataset.role)")
    assert roles == ["system", "user", "assistant", "tool", "assistant"]

    position = json.loads(
        page.eval_on_selector("tr[data-row=markup]", "r => JSON.stringify(r.dataset.position)")
    )
    page.click("a.row-link:text-is('markup')")
    answers = page.locator(f"#row-{position} .turn.assistant .text").all_inner_texts()
    assert answers[-1] == MARKUP
    assert page.evaluate("window.__pwned") is None
    assert requests == [report.as_uri()]  # nothing fetched: the file holds everything
