"""``osmo-run view RUN --export FILE``: one file holding everything, nothing that loads from
elsewhere, run strings escaped, and for large runs the failed rows plus a stated sample."""

from __future__ import annotations

import base64
import hashlib
import html as entities
import re
from pathlib import Path

from tests.view import records
from tests.view.conftest import MARKUP, Runs, osmo_run


def export(target: Path, cwd: Path, *args: str) -> tuple[str, str]:
    out = cwd / "report.html"
    done = osmo_run("view", target, "--export", out, *args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return out.read_text(encoding="utf-8"), done.stdout


def test_the_report_is_self_contained_and_its_policy_allows_only_itself(
    runs: Runs, tmp_path: Path
) -> None:
    html, _ = export(runs.a, tmp_path)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing from elsewhere
    assert "<link" not in html
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert policy is not None
    style = re.search(r"<style>(.*?)</style>", html, re.S)
    script = re.search(r"<script>(.*?)</script>", html, re.S)
    assert style is not None and script is not None
    for body in (style.group(1), script.group(1)):
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in entities.unescape(policy.group(1))
    assert "default-src 'none'" in entities.unescape(policy.group(1))
    assert html.count("<script") == 1  # the report's own; none from a row


def test_run_strings_are_escaped_in_the_report(runs: Runs, tmp_path: Path) -> None:
    html, _ = export(runs.a, tmp_path)
    assert MARKUP not in html
    assert "&lt;script&gt;window.__pwned=2&lt;/script&gt;" in html


def test_a_large_run_exports_failed_rows_and_a_seeded_sample(tmp_path: Path) -> None:
    results = records.write(tmp_path / "big" / "results.jsonl", records.mixed(300))
    html, said = export(results, tmp_path, "--export-sample", "5")
    sections = re.findall(r'<section class="transcript-export" id="row-(\d+)"', html)
    failed = [i for i in range(300) if i % 10 == 9 or i % 15 == 14]
    assert len(sections) == len(failed) + 5
    assert {int(s) for s in sections} >= set(failed)
    assert "all 40 failed and 5 of 260 others (a random sample, seed 0" in said
    assert "--export-all for every one" in html
    again, _ = export(results, tmp_path, "--export-sample", "5")
    assert re.findall(r'id="row-(\d+)"', again) == re.findall(r'id="row-(\d+)"', html)
    everything, said = export(results, tmp_path, "--export-all")
    assert len(re.findall(r'<section class="transcript-export" id="row-', everything)) == 300
    assert "all 40 failed and all 260 others" in said


def test_the_smoke_workflow_writes_the_report_it_uploads(tmp_path: Path) -> None:
    """The example GitHub job's own commands: its smoke run, then its export step."""
    import shlex

    import yaml

    from tests.conftest import REPO

    job = yaml.safe_load((REPO / ".github/workflows/osmo-run-smoke.yml").read_text())
    steps = {step.get("name"): step for step in job["jobs"]["smoke"]["steps"]}
    for name in ("datasets", "configs", "examples"):
        (tmp_path / name).symlink_to(REPO / name)
    for name in ("Smoke run with a gate", "Write the run as one HTML report"):
        argv = shlex.split(steps[name]["run"].replace("\n", " "))
        assert argv[0] == "osmo-run"
        done = osmo_run(*argv[1:], cwd=tmp_path)
        assert done.returncode in (0, 1), done.stderr  # the gate may fail: the report is written
    uploaded = steps["Upload the HTML report"]["with"]["path"]
    report = (tmp_path / uploaded).read_text(encoding="utf-8")
    assert "osmo-run report" in report and 'id="rows-table"' in report
    assert steps["Upload the HTML report"]["if"] == "always()"
