"""`mpirun_kit doctor`: is this host (or this cluster) fit to run a job?

Data flow: gather.py reads a host into facts.HostFacts -> checks.py judges facts
(pure) -> coordinate.py runs gathering on every host and the allreduce smoke test
-> report.py renders rows; cli/doctor.py maps failures to the exit code.
"""
from .checks import AllreduceResult, Check, Expectations
from .coordinate import DoctorReport, DoctorRequest
from .facts import HostFacts

__all__ = ["AllreduceResult", "Check", "Expectations", "DoctorReport", "DoctorRequest", "HostFacts"]
