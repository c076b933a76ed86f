"""Statistics users can trust: pass@k against hand-computed values, standard errors
against the standard library, and pass@k of a real ``--samples`` run."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from osmo_run.run.reporting.stats import (
    estimate_mean,
    mean_pass_at_k,
    pass_at_k,
    pass_at_k_ks,
    percentile,
    t_quantile,
    wilson_interval,
)
from osmo_run.run.reporting.summary import SummaryBuilder
from tests.conftest import CLI, WriteJsonl, read_jsonl


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # c / n
        (5, 2, 2, 1 - math.comb(3, 2) / math.comb(5, 2)),  # 1 - 3/10 = 0.7
        (5, 2, 3, 1 - math.comb(3, 3) / math.comb(5, 3)),  # 1 - 1/10 = 0.9
        (5, 2, 4, 1.0),  # n - c < k: every draw of 4 holds a pass
        (5, 2, 5, 1.0),
        (5, 0, 1, 0.0),
        (5, 0, 5, 0.0),
        (5, 5, 1, 1.0),
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (4, 2, 2, 5 / 6),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
        (10, 3, 4, 1 - math.comb(7, 4) / math.comb(10, 4)),  # 1 - 35/210
    ],
)
def test_pass_at_k_matches_hand_computed_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_spelled_out_for_n5_c2() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 5) == 1.0
    assert pass_at_k(5, 0, 3) == 0.0


def test_pass_at_k_stays_exact_where_binomials_are_huge() -> None:
    # C(1000, 500) overflows a float; the product form must not.
    expected = 1 - math.comb(990, 500) / math.comb(1000, 500)
    assert pass_at_k(1000, 10, 500) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_refuses_impossible_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(
    ("samples", "ks"),
    [(1, [1]), (2, [1, 2]), (3, [1, 2]), (4, [1, 2, 4]), (7, [1, 2, 4]), (16, [1, 2, 4, 8, 16])],
)
def test_reported_ks_are_powers_of_two_up_to_the_samples(samples: int, ks: list[int]) -> None:
    assert pass_at_k_ks(samples) == ks


def test_mean_pass_at_k_averages_rows_and_leaves_out_rows_with_too_few_samples() -> None:
    rows = [(5, 2), (5, 0), (5, 5), (1, 1)]
    assert mean_pass_at_k(rows, 1) == pytest.approx((0.4 + 0.0 + 1.0 + 1.0) / 4)
    assert mean_pass_at_k(rows, 2) == pytest.approx((0.7 + 0.0 + 1.0) / 3)  # (1, 1) left out
    assert mean_pass_at_k([(1, 1)], 2) is None
    assert mean_pass_at_k([], 1) is None


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        # two-sided 95% and 99% critical values from published t tables
        (0.975, 1, 12.706204736),
        (0.975, 2, 4.302652730),
        (0.975, 5, 2.570581836),
        (0.975, 10, 2.228138852),
        (0.975, 30, 2.042272456),
        (0.975, 1000, 1.962339081),
        (0.995, 3, 5.840909310),
        (0.025, 4, -2.776445105),
        (0.5, 7, 0.0),
    ],
)
def test_t_quantile_matches_published_values(p: float, df: int, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-8)


@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.999])
def test_t_quantile_matches_the_closed_forms_for_one_and_two_degrees(p: float) -> None:
    assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-12)
    assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-12)


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        (5, 10, (0.2365931, 0.7634069)),
        (10, 10, (0.7224672, 1.0)),
        (0, 20, (0.0, 0.1611252)),
        (1, 1, (0.2065493, 1.0)),
        (81, 263, (0.2553, 0.3662)),  # Wilson's own worked example, to 4 digits
    ],
)
def test_wilson_interval_by_hand(successes: int, n: int, expected: tuple[float, float]) -> None:
    low, high = wilson_interval(successes, n)
    assert (low, high) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(
    "values", [[0.25, 0.5, 0.75], [3.0, 2.0], [0.1, 0.7, 0.2, 0.9, 0.4, 0.0], [0.2, 0.9]]
)
def test_a_mean_of_graded_rewards_has_a_student_t_interval_within_the_observed_range(
    values: list[float],
) -> None:
    low, high = min(values), max(values)
    estimate = estimate_mean(
        len(values), sum(values), sum(v * v for v in values), low=low, high=high
    )
    mean = statistics.fmean(values)
    stderr = statistics.stdev(values) / math.sqrt(len(values))
    half = t_quantile(0.975, len(values) - 1) * stderr
    assert (estimate.n, estimate.method) == (len(values), "student-t")
    assert estimate.mean == pytest.approx(mean)
    assert estimate.stderr == pytest.approx(stderr, abs=1e-12)
    assert estimate.ci_low == pytest.approx(max(mean - half, low))
    assert estimate.ci_high == pytest.approx(min(mean + half, high))
    assert estimate.to_dict()["ci95"] == [estimate.ci_low, estimate.ci_high]
    assert estimate.to_dict()["ci_method"] == "student-t"


def test_rewards_of_0_and_1_get_a_wilson_interval_never_outside_0_1() -> None:
    # n = 2, one pass: a normal interval with z = 1.96 was -0.48..1.48
    two = estimate_mean(2, 1.0, 1.0, low=0.0, high=1.0, binary=True)
    assert (two.method, two.mean) == ("wilson", 0.5)
    assert (two.ci_low, two.ci_high) == pytest.approx(wilson_interval(1, 2))
    assert 0.0 < two.ci_low < 0.5 < two.ci_high < 1.0
    # all equal: a Wilson interval still has a width (it was zero-width)
    perfect = estimate_mean(10, 10.0, 10.0, low=1.0, high=1.0, binary=True)
    assert (perfect.ci_low, perfect.ci_high) == pytest.approx((0.7224672, 1.0), abs=1e-6)


def test_equal_rewards_that_are_not_0_or_1_give_no_interval_rather_than_a_zero_width_one() -> None:
    estimate = estimate_mean(4, 2.0, 1.0, low=0.5, high=0.5)
    assert (estimate.mean, estimate.stderr) == (0.5, 0.0)
    assert (estimate.ci_low, estimate.ci_high, estimate.method) == (None, None, None)


def test_estimate_mean_needs_two_values_for_an_error_and_one_for_a_mean() -> None:
    assert estimate_mean(0, 0.0, 0.0).to_dict() == {
        "n": 0,
        "mean": None,
        "stderr": None,
        "ci95": None,
        "ci_method": None,
        "clusters": None,
    }
    one = estimate_mean(1, 0.5, 0.25)
    assert (one.mean, one.stderr, one.ci_low) == (0.5, None, None)


def test_samples_of_one_row_are_clustered_not_counted_as_independent() -> None:
    """10 rows x 4 samples, each row's samples all equal: the data hold 10 observations,
    not 40; the clustered standard error is that of the 10 row means (Miller 2024)."""
    rows = [(4.0, 4.0 * (r % 2)) for r in range(10)]
    clustered = estimate_mean(40, 20.0, 20.0, low=0.0, high=1.0, clusters=rows)
    row_means = [float(r % 2) for r in range(10)]
    assert clustered.stderr == pytest.approx(statistics.stdev(row_means) / math.sqrt(10))
    assert (clustered.method, clustered.clusters) == ("student-t, clustered by row", 10)
    half = t_quantile(0.975, 9) * clustered.stderr
    assert clustered.ci_low == pytest.approx(0.5 - half)
    independent = estimate_mean(40, 20.0, 20.0, low=0.0, high=1.0)
    assert independent.stderr is not None and independent.stderr < clustered.stderr / 2
    # as a proportion: Wilson over the effective sample size, here the 9 of C(C-1)/C rows
    wilson = estimate_mean(40, 20.0, 20.0, binary=True, clusters=rows)
    assert wilson.method == "wilson, clustered by row"
    assert (wilson.ci_low, wilson.ci_high) == pytest.approx(wilson_interval(4.5, 9.0))


def test_percentile_interpolates_linearly() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0.5) == pytest.approx(2.5)
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 4.0
    assert percentile(values, 0.95) == pytest.approx(3.85)
    assert percentile([], 0.5) is None


def _record(row: int, sample: int, status: str, reward: float | None) -> dict[str, object]:
    return {
        "row_id": f"r{row}",
        "row_index": row,
        "sample_index": sample,
        "status": status,
        "reward": reward,
        "error_category": None if status == "success" else "agent_error",
        "timings": {"total_sec": 1.0},
    }


def test_summary_counts_failed_samples_as_failed_draws_for_pass_at_k() -> None:
    builder = SummaryBuilder(pass_threshold=0.5, samples_per_row=4)
    # row 0: 2 of 4 pass (one failure among the rest); row 1: none pass; row 2: 0.5 >= 0.5
    for sample, (status, reward) in enumerate(
        [("success", 1.0), ("success", 0.7), ("failure", None), ("success", 0.2)]
    ):
        builder.add_record(_record(0, sample, status, reward))
    for sample in range(4):
        builder.add_record(_record(1, sample, "success", 0.0))
    for sample in range(4):
        builder.add_record(_record(2, sample, "success", 0.5 if sample == 0 else 0.0))
    summary = builder.build()
    assert summary.total == 12
    assert summary.passed == 3
    expected = {
        1: (0.5 + 0 + 0.25) / 3,
        2: ((1 - 1 / 6) + 0 + 0.5) / 3,
        4: (1 + 0 + 1) / 3,
    }
    assert summary.pass_at_k == pytest.approx(expected)
    data = summary.to_dict()
    assert data["pass"]["pass_at_k"] == pytest.approx({str(k): v for k, v in expected.items()})
    assert data["coverage"] == pytest.approx(11 / 12)
    assert data["reward"]["mean_all"] == pytest.approx(2.4 / 12)
    assert data["reward"]["mean_graded"] == pytest.approx(2.4 / 11)


def test_samples_run_reports_pass_at_k_of_the_known_pass_counts(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    passes = {"none": 0, "one": 1, "two": 2, "all": 4}
    data = write_jsonl(
        [
            {"id": name, "prompt": "hi", "label": "x", "metadata": {"passes": c}}
            for name, c in passes.items()
        ]
    )
    output = tmp_path / "out.jsonl"
    proc = cli.local(
        data,
        "--workflow",
        "tests.workflows:ScriptedWorkflow",
        "--grader",
        "tests.workflows:SampleGrader",
        "--samples",
        "4",
        "-o",
        output,
    )
    assert proc.returncode == 0, proc.stderr
    records = read_jsonl(output)
    assert sorted((r["row_id"], r["sample_index"]) for r in records) == sorted(
        (name, i) for name in passes for i in range(4)
    )
    assert {r["rollout_id"] for r in records if r["row_id"] == "two"} == {
        "two~0",
        "two~1",
        "two~2",
        "two~3",
    }
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert summary["samples_per_row"] == 4
    assert summary["total"] == 16
    assert summary["pass"]["passed"] == 7
    # pass@1: mean c/4; pass@2: 1 - C(4-c, 2)/C(4, 2) per row; pass@4: any pass at all
    assert summary["pass"]["pass_at_k"] == pytest.approx(
        {
            "1": (0 + 0.25 + 0.5 + 1) / 4,
            "2": (0 + (1 - 3 / 6) + (1 - 1 / 6) + 1) / 4,
            "4": (0 + 1 + 1 + 1) / 4,
        }
    )
    assert "pass@1 0.438 · pass@2 0.583 · pass@4 0.75" in proc.stdout
    assert "16 rollouts (4 samples per row)" in proc.stdout
    # the four rows are four clusters: pass rate 7/16 with a standard error over rows
    assert summary["pass"]["ci_method"] == "wilson, clustered by row"
    assert summary["reward"]["all"]["clusters"] == 4
    assert "pass rate 95% CI " in proc.stdout and ", wilson, clustered by row" in proc.stdout


def test_printed_and_saved_intervals_stay_within_the_rewards_seen_and_name_their_method(
    cli: CLI, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    """Two graded rows and one failure: a z interval was mean ± 1.96 SE, reaching below 0
    and above the highest reward; now Student-t with 1 degree of freedom, clipped."""
    data = write_jsonl(
        [
            {"id": "a", "prompt": "hi", "label": "x", "metadata": {"reward": 0.2}},
            {"id": "b", "prompt": "hi", "label": "x", "metadata": {"reward": 0.9}},
            {"id": "c", "prompt": "hi", "label": "x", "metadata": {"raise": "RuntimeError"}},
        ]
    )
    output = tmp_path / "out.jsonl"
    grader = ("--grader", "tests.workflows:MetadataGrader")
    proc = cli.local(data, "--workflow", "tests.workflows:ScriptedWorkflow", *grader, "-o", output)
    assert proc.returncode == 1, proc.stderr
    reward = json.loads((tmp_path / "out.summary.json").read_text())["reward"]
    assert reward["graded"]["ci_method"] == reward["all"]["ci_method"] == "student-t"
    assert reward["graded"]["ci95"] == pytest.approx([0.2, 0.9])  # t(0.975, 1) = 12.7
    assert reward["all"]["ci95"] == pytest.approx([0.0, 0.9])  # the failure counts 0
    assert "(95% CI 0.2–0.9, student-t) over 2 graded" in proc.stdout
    assert "pass rate 95% CI 0–0.561, wilson" in proc.stdout  # 0 of 3 reached 1.0
