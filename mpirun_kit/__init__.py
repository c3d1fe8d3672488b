"""mpirun_kit: MPI cluster orchestration for multi-node GPU training.

Data flow, top to bottom:
  job spec (spec/) or hyperparameters  ->  LaunchSpec (spec/launch_spec.py)
  cluster discovery (cluster/)          ->  Cluster
  make plan (plan/)                     ->  LaunchPlan, a frozen printable value
  execute (exec/, entrypoint/)          ->  JobResult, every host exits with its code

This module only re-exports; importing it has no side effects.
"""

__version__ = "0.1.0"
