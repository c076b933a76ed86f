"""A serving run's results file is a run's results file: ``report`` summarizes it and the
viewer lists and shows its rollouts, as for ``osmo-run local``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.testclient import TestClient

from osmo_run.view.catalog import Catalog
from osmo_run.view.server import Viewer, create_app
from tests.conftest import CLI
from tests.serve.harness import serving


def test_report_and_view_read_a_serving_run(tmp_path: Path, cli: CLI) -> None:
    async def scenario() -> Path:
        async with serving(tmp_path) as server:
            ok = await server.admitted("good-1")
            bad = await server.admitted("bad-1", metadata={"raise": "RuntimeError"})
            await server.final("good-1", ok)
            await server.final("bad-1", bad)
        return server.results

    results = asyncio.run(scenario())
    report = cli("report", results)
    assert report.returncode == 1, report.stderr  # a failed rollout, as local says
    assert "rows      2 (success 1 · failure 1)" in report.stdout
    assert "bad lines" not in report.stdout + report.stderr

    viewer = Viewer(Catalog.open([results]), tmp_path / "cache")
    with TestClient(create_app(viewer), base_url="http://127.0.0.1") as client:
        assert client.get("/").status_code == 200
        key = next(iter(viewer.views))
        run = client.get(f"/runs/{key}")
        assert run.status_code == 200
        assert "good-1" in run.text and "bad-1" in run.text
        assert "not records" not in run.text  # every served line is a record
        assert run.text.count("<tr data-position") == 2
        for position in range(2):
            assert client.get(f"/runs/{key}/rows/{position}").status_code == 200
