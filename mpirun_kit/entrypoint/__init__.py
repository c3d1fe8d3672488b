"""The per-host entrypoint: every host of a job runs it; one becomes master, the rest workers.

main.py: discover the cluster and the LaunchSpec, build the LaunchPlan, pick the role.
master.py: result channel, wait for workers' sshd, run mpirun, write the failure file,
tell every worker the result.  worker.py: sshd, follow the master and the local MPI
daemon, exit with the job's code.  Every host exits with the same code.
"""
from .main import EntrypointOptions, run_entrypoint

__all__ = ["EntrypointOptions", "run_entrypoint"]
