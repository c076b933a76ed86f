"""Parquet dates and decimals in real Docker trials: a row is sent to its trial as JSON, so
a date or a decimal column once failed every row (``datetime`` and ``Decimal`` are not
JSON); they arrive as text."""

from __future__ import annotations

import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from tests.conftest import require_extra
from tests.harbor.conftest import harbor_spec, run_harbor

pa = require_extra("pyarrow", "parquet")
pq = require_extra("pyarrow.parquet", "parquet")

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_date_and_decimal_columns_reach_the_trial_as_text(
    docker_engine: None, tmp_path: Path
) -> None:
    dataset = tmp_path / "data.parquet"
    table = pa.table(
        {
            "id": ["p1", "p2"],
            "prompt": ["what is 6*7?", "and 40+2?"],
            "label": ["42", "42"],
            "answer": pa.array([Decimal("42"), Decimal("42")], pa.decimal128(4, 0)),
            "day": [datetime.date(2024, 1, 2), datetime.date(2024, 1, 3)],
            "at": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5)] * 2, pa.timestamp("us")),
        }
    )
    pq.write_table(table, dataset)
    run = run_harbor(tmp_path, None, harbor_spec(), str(dataset))
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(run.rows) == ["p1", "p2"]
    for row in run.rows.values():
        # the workflow answers metadata.answer: the decimal 42 arrived as the text "42"
        assert (row["status"], row["reward"]) == ("success", 1.0), row["error_message"]
    assert run.leftovers == []
