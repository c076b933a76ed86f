"""The benchmark's workload families, one module each (bench/run.py runs them)."""
