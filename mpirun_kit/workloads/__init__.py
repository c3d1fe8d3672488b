"""Workloads: programs a job runs on its ranks (not the toolkit's own measurements, which live in benchmarks/).

``allreduce`` is both jobs/allreduce-bench.yaml's program and the doctor's
cross-host smoke test.
"""
