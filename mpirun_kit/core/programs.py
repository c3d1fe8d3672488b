"""The package's own programs that other processes start by module path (``python -m MODULE``), named once.

Place in the data flow: a target (local, ssh, Slurm), the doctor and the job service start mpirun_kit's
command line in another process (the entrypoint on a host, ``launch`` under the local target, the doctor's
``--gather-only`` on each host, a detached job).  That link runs from a low layer up to ``cli/`` by an argv
string, which no import contract sees; naming the module here, once, makes it one place to read and one
test to check (tests/core/test_programs.py: it is setup.cfg's console script's module and has ``main``, and
no other file of the package spells it).
"""
from __future__ import annotations

#: the command line's module: ``python -m mpirun_kit.cli.main ARGS`` is ``mpirun_kit ARGS``.
CLI_MODULE = "mpirun_kit.cli.main"


def cli_argv(python: str, *args: str) -> list[str]:
    """``python -m CLI_MODULE ARGS...``: mpirun_kit's command line run by the interpreter ``python``."""
    return [python, "-m", CLI_MODULE, *args]
