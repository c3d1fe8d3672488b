"""PR_SET_PDEATHSIG: a process gets a signal when the one that started it dies (Linux).

Written once, used three ways:

* in process: the rank wrapper calls ``set_parent_death_signal`` so a rank is
  SIGTERMed when its MPI daemon dies (no orphaned ranks, open-mpi/ompi #7790);
* ``with_parent_death_signal(argv, ...)``: the argv that starts a child with it set
  (supervisor.start_process's ``parent_death_signal``, the sim hosts' init);
* as a script, ``python -I -S pdeathsig.py SIGNUM PARENT_PID ARGV...`` sets it and
  execs ARGV: that argv's fallback where util-linux's setpriv is missing (a
  preexec_fn would run Python between fork and exec in a multi-threaded parent).

Stdlib only and no package imports: the script form runs without site-packages, and
supervisor.py imports it without importing anything above itself.
"""
from __future__ import annotations

import errno
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
#: this file, run as a script by ``with_parent_death_signal``'s fallback.
_SCRIPT = os.path.abspath(__file__)


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


def with_parent_death_signal(argv: list[str], signum: int, path: str | None) -> list[str]:
    """``argv`` run so that it gets ``signum`` when this process dies (PR_SET_PDEATHSIG).

    Set by a tiny exec helper rather than a ``preexec_fn``: Python code between fork and
    exec in a multi-threaded parent can deadlock (a lock held by another thread at fork).
    ``setpriv --pdeathsig`` (util-linux, in every Debian/Ubuntu image) is a C binary that
    costs ~1 ms; this file run as a script is the fallback.  The program is looked up on
    ``path`` first so a missing one still fails as an OSError, not as the helper's exit 127.

    Raises:
        FileNotFoundError: ``argv[0]`` is not found on ``path``.
    """
    import shutil   # here: the rank wrapper imports this module before it takes its key, for the prctl alone

    if shutil.which(argv[0], path=path) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        return [setpriv, "--pdeathsig", signal.Signals(signum).name, "--", *argv]
    return [sys.executable, "-I", "-S", _SCRIPT, str(int(signum)), str(os.getpid()), *argv]


if __name__ == "__main__":
    set_parent_death_signal(int(sys.argv[1]), int(sys.argv[2]))
    os.execvp(sys.argv[3], sys.argv[3:])
