"""mpirun_kit: MPI cluster orchestration for multi-node GPU training.

Data flow, top to bottom:
  job spec (spec/) or hyperparameters  ->  LaunchSpec (spec/launch_spec.py)
  cluster discovery (cluster/)          ->  Cluster
  make plan (plan/)                     ->  LaunchPlan, a frozen printable value
  execute (exec/, entrypoint/, rank/)   ->  JobResult, every host exits with its code
  where it runs (targets/)              ->  Target.prepare -> DryRun, Target.run -> Outcome
  commands (cli/)                       ->  argparse, output, the exit code (errors.ExitCode)

README.md's "Architecture" section has the diagram and a table of every folder.
Importing this package has no side effects (every rank imports it at start).
"""

__version__ = "0.1.0"
