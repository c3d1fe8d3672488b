"""Benchmark programs run as jobs (jobs/allreduce-bench.yaml runs allreduce.py)."""
