"""Workflows, graders and driver loops of the benchmarks (bench/run.py runs them)."""
