"""A simulated multi-host cluster on one machine, for tests, benchmarks and trying jobs locally.

Each host algo-1..algo-N gets its own network, PID, UTS and mount namespaces, its own
sshd, ``/opt/ml`` (with a SageMaker-format ``resourceconfig.json``), ``/root/.ssh``,
``/etc/hosts``, ``/tmp``, ``/run`` and ``/dev/shm``.  The hosts share one L2 segment
(a bridge inside a private "switch" namespace), so nothing is added to the
machine's own network namespace.

Data flow: ``plan_layout`` (pure) -> ``SimLayout`` value -> ``SimCluster.up()``
creates namespaces and starts one ``hostinit`` (PID 1) per host -> callers run
programs on hosts with ``popen``/``start_entrypoints`` -> ``down()`` kills every
process in the namespaces by pid and deletes them.  Needs root.
"""
from .cluster import (HOST_OPT_ML, SimCluster, SimClusterExistsError, SimError, SimProcess, SimStopped, down_all,
                      down_named, list_clusters, purge_root, sweep_orphans)
from .layout import SimHost, SimLayout, plan_layout

__all__ = ["HOST_OPT_ML", "SimCluster", "SimClusterExistsError", "SimError", "SimProcess", "SimHost", "SimLayout",
           "plan_layout", "down_all", "down_named", "list_clusters", "purge_root", "SimStopped", "sweep_orphans"]
