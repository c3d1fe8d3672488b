"""Execution: everything that runs processes, opens sockets or handles signals.

The plan (plan/) says what to run; these modules run it: ``ssh`` waits for the
workers' sshd, ``sshd`` starts one, ``channel`` is the master's result channel
(rank reports in, heartbeats and the result out), ``process`` runs mpirun and
streams its output, ``daemon`` follows the local MPI daemon on a worker,
``result`` turns rank reports into the job's result, ``signals`` forwards
SIGTERM/SIGINT, and ``sshkeys`` derives and installs the per-job ssh keys.
Every wait here takes its deadline from the injected clock in core/clock.py.
entrypoint/ strings them together; targets/ use them too.
"""
