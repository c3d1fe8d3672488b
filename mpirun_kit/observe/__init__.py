"""Seeing inside a running job: the launch timeline, rank progress, and hung-rank reports.

* ``timeline``: every entrypoint records its phases (wall-clock, monotonic, own CPU time);
  the master merges them into ``<opt_ml>/output/timeline.json``; ``mpirun_kit timeline``
  reads that file back (critical path, Gantt chart).
* ``relay``: the rank wrapper's side of progress reports, stack dumps and watching its program from
  outside (stdlib only); ``stacks``: reading a program's stacks (py-spy, eu-stack, gdb) and what they say.
* ``hang``: the master's per-rank progress table, the stall policy, the hang report.

The public progress API is ``mpirun_kit.progress``.
"""
