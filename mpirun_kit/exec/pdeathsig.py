"""PR_SET_PDEATHSIG: a process gets a signal when the one that started it dies (Linux).

Written once, used two ways:

* in process: the rank wrapper calls ``set_parent_death_signal`` so a rank is
  SIGTERMed when its MPI daemon dies (no orphaned ranks, open-mpi/ompi #7790);
* as a script, ``python -I -S pdeathsig.py SIGNUM PARENT_PID ARGV...`` sets it and
  execs ARGV: process.py's fallback where util-linux's setpriv is missing (a
  preexec_fn would run Python between fork and exec in a multi-threaded parent).

Stdlib only and no package imports: the script form runs without site-packages.
"""
from __future__ import annotations

import os
import sys

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(signum: int, parent: int) -> bool:
    """Ask for ``signum`` when our parent dies; False where prctl is unavailable.

    ``parent`` is the pid the caller saw as its parent before the call: if it already
    changed, the parent died before prctl took effect, and the signal is sent at once.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signum))
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:
        os.kill(os.getpid(), int(signum))
    return True


if __name__ == "__main__":
    set_parent_death_signal(int(sys.argv[1]), int(sys.argv[2]))
    os.execvp(sys.argv[3], sys.argv[3:])
