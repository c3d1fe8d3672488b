"""PR_SET_PTRACER: the rank wrapper's stack readers may trace its program where Yama allows only ancestors.

Place in the data flow: the rank wrapper (rank/wrapper.py) starts its program through ``argv``; the relay
(observe/relay.py) then reads the program's stacks with py-spy, eu-stack or gdb (observe/stacks.py), each a
child of the wrapper and so a sibling of the program, not its ancestor.  Under Yama's ``ptrace_scope`` 1
(Ubuntu's default) a process may ptrace only its descendants, unless the tracee named it with
``prctl(PR_SET_PTRACER, pid)``: every read failed with EPERM and a hang report had no stacks.  So where the
scope is 1 the program starts through this file, run as a script (``python -I -S ptracer.py PID -- ARGV...``):
it names PID (the wrapper; its children are the readers) the program's tracer, no other process, then execs
the program, and the declaration outlives the exec (Yama keeps it for the process until it exits).

A tiny exec helper rather than a ``preexec_fn``: Python between fork and exec in a multi-threaded parent can
deadlock (exec/pdeathsig.py's reason).  Scope 0 needs nothing, and under 2 (admin only) or 3 (no ptrace) no
declaration helps: the program starts as it is, without the helper's interpreter start.

Stdlib only and no package imports: the script form runs without site-packages.
"""
from __future__ import annotations

import errno
import os
import sys

#: prctl option (Yama): the calling process may be traced by this pid and its descendants.
PR_SET_PTRACER = 0x59616D61
#: Yama's setting: 0 classic (same uid), 1 descendants only, 2 admin only, 3 no ptrace; absent without Yama.
YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


def scope(path: str = YAMA_SCOPE) -> int | None:
    """This machine's Yama ptrace_scope; None where the kernel has no Yama (nothing restricts ptrace further)."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def argv(program: list[str], tracer: int, scope_now: int | None, path: str | None = None) -> list[str]:
    """``program`` as the wrapper starts it: through this script, naming ``tracer`` (the wrapper's pid), when
    ``scope_now`` is 1; else as it is.  The program is looked up on ``path`` first (the program's PATH), so a
    missing one still fails as an OSError in the wrapper, not as the helper's exit.

    Raises:
        FileNotFoundError: under scope 1, ``program[0]`` is not found on ``path``.
    """
    if scope_now != 1:
        return list(program)
    import shutil   # here, only under scope 1: every rank wrapper imports this module at start

    if shutil.which(program[0], path=path) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program[0])
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(int(tracer)), "--", *program]


def set_ptracer(pid: int) -> bool:
    """Let ``pid`` and its descendants ptrace this process; False where prctl refuses (no Yama: EINVAL)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PTRACER, int(pid), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


if __name__ == "__main__":
    set_ptracer(int(sys.argv[1]))
    args = sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:]
    try:
        os.execvp(args[0], args)
    except OSError as exc:   # argv checked it moments ago; it went since
        print(f"mpirun_kit.observe.ptracer: cannot start {args[0]!r}: {exc.strerror}", file=sys.stderr)
        sys.exit(127)
