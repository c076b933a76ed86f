"""Results files for the viewer benchmark (bench/run.py --only view): ``N`` records in the
output format, with a short conversation each, every 10th a timeout and every 15th an
agent error, written with a manifest so ``osmo-run view`` treats the directory as a run.

    python bench/workloads/view_data.py OUT_DIR ROWS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def write_run(folder: Path, rows: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    results = folder / "results.jsonl"
    encoder = json.JSONEncoder(ensure_ascii=False)
    with open(results, "w", encoding="utf-8") as out:
        for i in range(rows):
            failed = i % 10 == 9 or i % 15 == 14
            category = "timeout" if i % 10 == 9 else "agent_error"
            record = {
                "schema_version": 1,
                "row_id": f"row-{i}",
                "rollout_id": f"row-{i}",
                "row_index": i,
                "sample_index": 0,
                "line": i + 1,
                "attempt": 1,
                "attempts": [],
                "status": "failure" if failed else "success",
                "reward": None if failed else (i % 5) / 4,
                "error_category": category if failed else None,
                "error_message": f"{category} in row {i}" if failed else None,
                "error_phase": "workflow" if failed else None,
                "grader_skipped": None,
                "timings": {
                    "queued_sec": 0.0,
                    "setup_sec": None,
                    "workflow_sec": (i % 997) / 1000,
                    "grader_sec": 0.0001,
                    "total_sec": (i % 997) / 1000 + 0.0001,
                },
                "sample": None
                if failed
                else {
                    "messages": [
                        {"role": "system", "content": "You are a calculator."},
                        {"role": "user", "content": f"What is {i} + 2?"},
                        {"role": "assistant", "content": f"The answer is {i + 2}."},
                    ],
                    "metrics": {"turns": 1.0},
                },
                "info": {},
                "backend": {},
                "usage": {
                    "prompt_tokens": 30 + i % 50,
                    "completion_tokens": 8 + i % 7,
                    "total_tokens": 38 + i % 50 + i % 7,
                    "model_calls": 1,
                    "model_sec": 0.05,
                },
            }
            out.write(encoder.encode(record) + "\n")
    manifest = {
        "schema_version": 1,
        "run_id": f"bench-view-{rows}",
        "dataset_name": f"bench-{rows}",
        "defining": {"backend": "local", "rows": rows, "samples_per_row": 1},
        "info": {"pass_threshold": 1.0},
    }
    (folder / "results.manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return results


if __name__ == "__main__":
    write_run(Path(sys.argv[1]), int(sys.argv[2]))
