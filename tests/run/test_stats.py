"""Statistics users can trust: pass@k against hand-computed values, standard errors
against the standard library, and pass@k of a real ``--samples`` run."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from osmo_run.run.stats import (
    Z_95,
    estimate_mean,
    mean_pass_at_k,
    pass_at_k,
    pass_at_k_ks,
    percentile,
)
from osmo_run.run.summary import SummaryBuilder
from tests.conftest import CLI, read_jsonl

WriteJsonl = Callable[..., Path]


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
    "values",
    [[1.0, 0.0, 1.0, 1.0, 0.0], [0.25, 0.5, 0.75], [3.0, 3.0], [0.1, 0.7, 0.2, 0.9, 0.4, 0.0]],
)
def test_estimate_mean_matches_statistics_stdev(values: list[float]) -> None:
    estimate = estimate_mean(len(values), sum(values), sum(v * v for v in values))
    mean = statistics.fmean(values)
    stderr = statistics.stdev(values) / math.sqrt(len(values))
    assert estimate.n == len(values)
    assert estimate.mean == pytest.approx(mean)
    assert estimate.stderr == pytest.approx(stderr, abs=1e-12)
    assert estimate.ci_low == pytest.approx(mean - 1.959964 * stderr, abs=1e-6)
    assert estimate.ci_high == pytest.approx(mean + 1.959964 * stderr, abs=1e-6)
    assert estimate.to_dict()["ci95"] == [estimate.ci_low, estimate.ci_high]


def test_estimate_mean_by_hand_for_three_passes_in_five() -> None:
    # mean 0.6; sample variance (3 * 0.4^2 + 2 * 0.6^2) / 4 = 0.3; stderr sqrt(0.3 / 5)
    estimate = estimate_mean(5, 3.0, 3.0)
    assert estimate.mean == pytest.approx(0.6)
    assert estimate.stderr == pytest.approx(math.sqrt(0.06))
    assert estimate.ci_low == pytest.approx(0.6 - Z_95 * math.sqrt(0.06))


def test_estimate_mean_needs_two_values_for_an_error_and_one_for_a_mean() -> None:
    assert estimate_mean(0, 0.0, 0.0).to_dict() == {
        "n": 0,
        "mean": None,
        "stderr": None,
        "ci95": None,
    }
    one = estimate_mean(1, 0.5, 0.25)
    assert (one.mean, one.stderr, one.ci_low) == (0.5, None, None)


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
