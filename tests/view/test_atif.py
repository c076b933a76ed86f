"""``--export-atif DIR``: every rollout with a sample as an ATIF trajectory that Harbor's
own validator accepts and Harbor's trace extraction reads back as the conversation."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import require_extra

require_extra("harbor", "harbor")

from harbor.utils.traces_utils import extract_conversations_from_trajectory, iter_trial_dirs  # noqa: E402
from harbor.utils.trajectory_validator import TrajectoryValidator  # noqa: E402

from tests.view.conftest import MARKUP, Runs, osmo_run  # noqa: E402


def test_rollouts_become_trajectories_harbor_reads(runs: Runs, tmp_path: Path) -> None:
    out = tmp_path / "atif"
    done = osmo_run("view", runs.a, "--export-atif", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "wrote 13 ATIF trajectories" in done.stdout
    assert "3 rollouts without a sample skipped" in done.stdout
    trials = sorted(p.name for p in iter_trial_dirs(out))
    assert len(trials) == 13 and "ok-00" in trials and "boom" not in trials
    for trial in trials:
        validator = TrajectoryValidator()
        assert validator.validate(out / trial / "agent" / "trajectory.json"), validator.errors

    data = json.loads((out / "ok-00" / "agent" / "trajectory.json").read_text())
    sources = [step["source"] for step in data["steps"]]
    assert sources == ["system", "user", "agent", "agent"]
    call_step = data["steps"][2]
    assert call_step["tool_calls"][0]["function_name"] == "calculator"
    assert call_step["tool_calls"][0]["arguments"] == {"expression": "2+2"}
    assert call_step["observation"]["results"][0] == {
        "source_call_id": "call_ok-00",
        "content": "4",
    }
    assert data["final_metrics"]["total_prompt_tokens"] == 225
    assert data["extra"]["osmo_run"]["reward"] == 1.0

    conversations = extract_conversations_from_trajectory(
        out / "markup" / "agent" / "trajectory.json",
        {
            "agent_name": "osmo-run",
            "model_name": None,
            "model_provider": None,
            "start_time": None,
            "run_id": "r",
            "trial_name": "markup",
        },
    )
    final = conversations[-1]["conversations"]
    assert final[-1]["content"] == MARKUP  # kept verbatim: it is data, not markup, here


TRICKY_IDS = ["../../escape", "a/b", "a_b", "x" * 300, "nul\x00id", "Upper"]


def test_trajectory_folders_are_the_rollouts_safe_names(tmp_path: Path) -> None:
    # ids are data: "../../escape" once wrote outside DIR, "a/b" and "a_b" shared a folder,
    # a 300-character id was too long a name, and a NUL ended the export with exit 3
    dataset = tmp_path / "tricky.jsonl"
    rows = [{"id": row_id, "prompt": f"hi {i}"} for i, row_id in enumerate(TRICKY_IDS)]
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run = tmp_path / "runs" / "t"
    done = osmo_run(
        "local", dataset, "--workflow", "tests.workflows:EchoWorkflow", "--samples", "2",
        "-o", run / "results.jsonl", "--plain", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "deep" / "atif"
    done = osmo_run("view", run, "--export-atif", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"wrote {2 * len(TRICKY_IDS)} ATIF trajectories" in done.stdout
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["atif"]  # nothing beside
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert sorted(p.name for p in out.iterdir()) == sorted(r["safe_name"] for r in records)
    for record in records:
        trajectory = out / record["safe_name"] / "agent" / "trajectory.json"
        data = json.loads(trajectory.read_text())
        assert data["trajectory_id"] == record["rollout_id"]
        assert data["extra"]["osmo_run"]["row_id"] == record["row_id"]
