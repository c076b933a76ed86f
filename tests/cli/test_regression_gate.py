"""``osmo-run report A B --fail-on-regression``: the regression gate's exit code, its line,
its JUnit XML and its step summary, on runs written by hand (rewards chosen per row)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import CLI, cli_env
from tests.view import records


def _run(path: Path, rewards: list[float]) -> Path:
    return records.write(path, [records.record(i, reward=r) for i, r in enumerate(rewards)])


def test_a_significant_drop_fails_the_gate_with_junit_and_step_summary(
    cli: CLI, tmp_path: Path
) -> None:
    a = _run(tmp_path / "a" / "results.jsonl", [1.0] * 40)
    b = _run(tmp_path / "b" / "results.jsonl", [0.0] * 12 + [1.0] * 28)
    junit, summary = tmp_path / "gate.xml", tmp_path / "summary.md"
    proc = cli(
        "report", a, b, "--fail-on-regression", "--max-regression", "0.02",
        "--junit-xml", junit, env=cli_env(GITHUB_STEP_SUMMARY=str(summary)),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    # 12 rows now failing, none now passing: exact McNemar p = 2^-12 = 0.000244
    assert "regression gate failed: pass rate dropped by 0.300" in out, out
    assert "p = 0.000244 < --regression-alpha 0.05" in out
    assert "exact McNemar: 12 rows now failing, 0 now passing" in out
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    assert (
        case is not None
        and case.get("name") == "regression gate: pass rate of B against baseline A"
    )
    failure = case.find("failure")
    assert failure is not None and failure.get("message", "").startswith("regression gate failed")
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## osmo-run regression gate — ❌ failed")
    assert "mean reward 1.000 -&gt; 0.700 on 40 rows in both" in text  # markdown-escaped


def test_a_drop_the_test_cannot_tell_from_noise_passes_and_says_so(
    cli: CLI, tmp_path: Path
) -> None:
    a = _run(tmp_path / "a.jsonl", [1.0] * 18 + [0.0] * 2)
    b = _run(tmp_path / "b.jsonl", [0.0] * 3 + [1.0] * 15 + [1.0, 0.0])
    junit = tmp_path / "gate.xml"
    proc = cli("report", a, b, "--fail-on-regression", "--junit-xml", junit)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    # 3 now failing, 1 now passing: P(X >= 3 | n=4) = 5/16
    assert "but the paired test cannot tell that from noise (p = 0.312 >= --regression-alpha" in out
    root = ET.parse(junit).getroot()
    assert root.get("failures") == "0" and root.find("testsuite/testcase/failure") is None
    # the reward metric on the same runs
    reward = cli("report", a, b, "--fail-on-regression", "--regression-metric", "reward")
    assert reward.returncode == 0 and "mean reward dropped by 0.100" in " ".join(
        reward.stdout.split()
    )


def test_gate_flags_that_cannot_be_used_get_one_line(cli: CLI, tmp_path: Path) -> None:
    a = _run(tmp_path / "a.jsonl", [1.0] * 4)
    for args, message in (
        ((a, "--fail-on-regression"), "take two runs: A (baseline) and B"),
        ((a, a, "--fail-on-regression", "--regression-alpha", "1.5"), "give a level between 0"),
        ((a, a, "--junit-xml", tmp_path / "x.xml"), "add --fail-on-regression"),
        ((a, a, "--fail-on-regression", "--regression-metric", "f1"), "give pass or reward"),
    ):
        proc = cli("report", *args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def _hand_edited(path: Path, rewards: dict[int, str], rows: int = 20) -> Path:
    """A run of ``rows`` passing rows whose line ``i`` has its reward replaced by the raw
    JSON text ``rewards[i]`` (what a hand edit or a damaged file can hold)."""
    _run(path, [1.0] * rows)
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, raw in rewards.items():
        lines[i] = lines[i].replace('"reward": 1.0', f'"reward": {raw}', 1)
        assert raw in lines[i]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_b_lacking_rows_of_the_baseline_fails_the_gate(cli: CLI, tmp_path: Path) -> None:
    """Rows B lost (non-finite rewards are not records, a truncated file) are no evidence of
    no regression: the gate used to pass on the rows left."""
    a = _run(tmp_path / "a.jsonl", [1.0] * 20)
    b = _hand_edited(
        tmp_path / "b.jsonl", {1: "NaN", 2: "Infinity", 3: "-Infinity", 4: "1e400", 5: '"high"'}
    )
    junit = tmp_path / "gate.xml"
    proc = cli("report", a, b, "--fail-on-regression", "--junit-xml", junit)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 1, out
    assert (
        "regression gate failed: B lacks 5 of baseline A's 20 rows (not run, or lines that "
        "are not records)" in out
    ), out
    assert "reward: nan is not a finite number" in out
    assert ET.parse(junit).getroot().get("failures") == "1"
    assert "Traceback" not in proc.stderr


def test_runs_with_no_row_in_common_fail_the_gate(cli: CLI, tmp_path: Path) -> None:
    a = _run(tmp_path / "a.jsonl", [1.0] * 4)
    b = records.write(tmp_path / "b.jsonl", [records.record(100 + i, reward=1.0) for i in range(4)])
    proc = cli("report", a, b, "--fail-on-regression")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "regression gate failed: B lacks 4 of baseline A's 4 rows" in " ".join(
        proc.stdout.split()
    )


def test_a_huge_finite_reward_is_shown_in_a_few_digits(cli: CLI, tmp_path: Path) -> None:
    a = _run(tmp_path / "a.jsonl", [1.0] * 20)
    b = _hand_edited(tmp_path / "b.jsonl", {0: "1e308"})
    proc = cli("report", a, b, "--fail-on-regression", "--regression-metric", "reward")
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, out
    assert "mean reward 1.000 -> 5e+306 on 20 rows" in out, out
    assert "00000000000" not in proc.stdout
