"""Rank side: what runs inside every rank that mpirun starts, and the environment it reads.

``python -m mpirun_kit.rank -- PROGRAM`` (``__main__`` -> ``wrapper.main``) is what
the launch plan puts after mpirun's own argv.  ``contract`` names the variables the
plan sets for the wrapper and parses the MPI's rank variables (one precedence, used
by the wrapper, pinning and plan/); ``pinning`` places the rank on its GPU and CPUs.

Deliberately empty: every rank imports this package at start, on the launch's
critical path, and plan/ imports ``contract`` without pulling in exec/.
"""
