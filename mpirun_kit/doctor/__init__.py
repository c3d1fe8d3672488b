"""`mpirun_kit doctor`: is this host (or this cluster) fit to run a job?

Data flow: gather.py reads a host into facts.HostFacts -> checks.py judges facts
(pure) -> coordinate.py runs gathering on every host and the allreduce smoke test
-> report.py renders rows; cli/doctor.py maps failures to the exit code.

No re-exports: its users import the module they need (``doctor.coordinate``, ``doctor.gather``), so a host
that only gathers its facts does not load the checks and the coordinator.
"""
