"""osmosis-ai 0.3.8's own rollout server hosting the bench workflows (run in
bench/.venvs/osmosis, which bench/setup.sh makes with the ``server`` extra): the entrypoint
an osmosis user writes, ``create_rollout_server(backend=LocalBackend(...))`` under uvicorn.

    python osmosis_server.py --port P --workflow chat|noop --concurrency C

Uvicorn's access log is off (osmo-run serve logs no line per request either), so the two
servers are compared on serving, not on logging.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workflow", choices=("chat", "noop"), required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from serve_driver import lift_open_files_limit

    lift_open_files_limit()  # 1,000 rollouts in flight: their requests and model calls
    import uvicorn
    from osmosis_ai.rollout.backend import LocalBackend
    from osmosis_ai.rollout.server import create_rollout_server
    from osmosis_ai.rollout.types import AgentWorkflowConfig, ConcurrencyConfig
    from osmosis_workloads import ChatWorkflow, ExactMatchGrader, NoopWorkflow

    backend = LocalBackend(
        workflow=ChatWorkflow if args.workflow == "chat" else NoopWorkflow,
        workflow_config=AgentWorkflowConfig(
            name=f"bench-{args.workflow}",
            concurrency=ConcurrencyConfig(max_concurrent=args.concurrency),
        ),
        grader=ExactMatchGrader,
    )
    app = create_rollout_server(backend=backend, configure_logging=False)
    uvicorn.run(app, host="127.0.0.1", port=args.port, access_log=False, log_level="warning")


if __name__ == "__main__":
    main()
