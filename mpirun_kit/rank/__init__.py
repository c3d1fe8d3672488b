"""Rank side: what runs inside every rank that mpirun starts, and the environment it reads.

``python -m mpirun_kit.rank -- PROGRAM`` (``__main__`` -> ``wrapper.main``) is what
the launch plan puts after mpirun's own argv.  ``pinning`` places the rank on its GPU
and CPUs.  The variables the plan sets for the wrapper, and the parser of the MPI's rank
variables, are plan/contract.py: plan/ writes them, and plan/ sits below rank/.

Deliberately empty: every rank imports this package at start, on the launch's
critical path.
"""
