"""A training loop in the shape of GRPO, with osmo-run serve producing the rollouts.

The trainer serves its policy (here the embedded SmolLM2-135M, standing in for the
trainer's own inference server), and each step sends K prompts x N samples to
``osmo-run serve`` with the policy's URL and version, takes the rewards as they come back,
and computes group-relative advantages (each sample's reward against its group's mean and
spread). Where a real trainer updates the weights, this one bumps the policy version.

    python examples/train/grpo.py [--steps 2] [--prompts 2] [--samples 4]

Needs the embedded model (make llm-example installs it) and the serve extra.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from osmo_run.client import Rollout, ServeClient  # noqa: E402
from osmo_run.llm.embedded import EmbeddedLLMServer  # noqa: E402

QUESTIONS = [
    ("What is the capital of France? Answer in one word.", "Paris"),
    ("What colour is the sky on a clear day? Answer in one word.", "blue"),
    ("How many legs does a dog have? Answer with a number.", "4"),
    ("What is the opposite of hot? Answer in one word.", "cold"),
]


def start_server(output: Path, concurrency: int) -> tuple[subprocess.Popen[str], str]:
    """``osmo-run serve`` in a process of its own; it and the URL it listens on."""
    server = subprocess.Popen(
        [
            sys.executable, "-m", "osmo_run", "serve",
            "--workflow", "examples.train.rollout:PolicyAnswer",
            "--grader", "examples.train.rollout:MentionsAnswer",
            "--code-dir", str(REPO), "--port", "0", "--concurrency", str(concurrency),
            "--display", "none", "--output", str(output),
        ],
        cwd=REPO, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stderr is not None
    for line in server.stderr:
        if match := re.search(r"listening on (http://\S+)", line):
            return server, match.group(1)
    raise SystemExit(f"osmo-run serve did not start (exit {server.wait()})")


def advantages(rewards: list[float]) -> list[float]:
    """GRPO's group-relative advantage: (reward - group mean) / group spread."""
    mean = statistics.fmean(rewards)
    spread = statistics.pstdev(rewards)
    return [(r - mean) / (spread + 1e-6) for r in rewards]


async def train(url: str, policy_url: str, steps: int, prompts: int, samples: int) -> None:
    version = 1
    async with ServeClient(url) as client:
        for step in range(1, steps + 1):
            chosen = [QUESTIONS[(step * prompts + i) % len(QUESTIONS)] for i in range(prompts)]
            batch = [
                Rollout(f"step{step}-q{q}-s{s}", [{"role": "user", "content": question}],
                        policy_url, label=answer, metadata={"policy_version": version})
                for q, (question, answer) in enumerate(chosen)
                for s in range(samples)
            ]  # fmt: skip
            rewards: dict[str, float] = {}
            async for result in client.run_batch(batch):
                back = result.answer["sample"]["extra_fields"]["policy_version"]
                assert back == version, f"{result.rollout_id} came back from version {back}"
                rewards[result.rollout_id] = result.reward or 0.0
            for q in range(prompts):
                group = [rewards[f"step{step}-q{q}-s{s}"] for s in range(samples)]
                shown = ", ".join(f"{a:+.2f}" for a in advantages(group))
                print(f"step {step} prompt {q}: rewards {group} advantages [{shown}]")
            # a trainer computes the policy loss from these advantages and updates the
            # weights here; the next step's rollouts then carry the new version
            version += 1
            print(f"step {step}: mean reward {statistics.fmean(rewards.values()):.2f}, "
                  f"policy now version {version}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--samples", type=int, default=4)
    args = parser.parse_args()
    policy = EmbeddedLLMServer(parallel=4)
    policy_endpoint = policy.start()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            server, url = start_server(Path(scratch) / "results.jsonl", concurrency=4)
            try:
                asyncio.run(
                    train(url, policy_endpoint.base_url, args.steps, args.prompts, args.samples)
                )
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(60)
                if server.stderr is not None:
                    server.stderr.close()
    finally:
        policy.stop()


if __name__ == "__main__":
    main()
