"""Fail fast for Python ranks: a rank on its way out with a failing code aborts the MPI job instead of waiting.

The rank wrapper (rank/wrapper.py) puts this directory first on the program's ``PYTHONPATH``, so every Python
program a rank runs imports this file at start-up (``site``), whatever interpreter runs it: it is self-contained
(the stdlib only; the program's interpreter may not have mpirun_kit installed).  Then it imports the
``sitecustomize`` it hides, if any (Debian's, a virtualenv's), so nothing of theirs is lost.

Why: mpi4py finalises MPI in the interpreter's exit (``Py_AtExit``), and ``MPI_Finalize`` waits for every other
rank.  A rank that calls ``sys.exit(3)`` or dies of an exception while the others wait in a collective therefore
never exits, mpirun never learns of its code, and the job sat until the hang report (issue #40).  Here a failing
exit (``sys.exit`` with a code other than 0, or an unhandled exception) registers an ``atexit`` handler; Python's
handlers run after the program's ``finally`` blocks and before mpi4py's finalisation, and this one calls
``MPI_Abort`` with the code when mpi4py initialised MPI and has not finalised it: Open MPI then ends every rank at
once and mpirun exits with that code, as ``python -m mpi4py`` does.  Not during a stop: a rank whose program got
SIGTERM, SIGINT or SIGHUP (the master's graceful stop; its handler's code) exits as it chose, so the other ranks'
handlers (a checkpoint) are not cut short.
"""
import atexit
import importlib.machinery
import importlib.util
import os
import signal
import sys

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: what a program's handler of those signals exits with (128 + N): a stop, not a failure
_STOP_CODES = frozenset(128 + s for s in _STOP_SIGNALS)
_state = {"stopping": False, "armed": False}


def _abort(code: int) -> None:
    """MPI_Abort(code) when mpi4py has MPI up and the job is not being stopped."""
    if _state["stopping"] or code in _STOP_CODES:
        return
    mpi = sys.modules.get("mpi4py.MPI")     # a look-up only: a rank that never used MPI has nothing to abort
    try:
        if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
            return
    except Exception:  # noqa: BLE001 - a half-torn-down module: leave the exit as it is
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream cannot hold the abort back
            pass
    print(f"mpirun_kit.rank: this rank exits with code {code} while MPI is up; aborting the MPI job so the other "
          "ranks do not wait for it (fail fast)", file=sys.stderr, flush=True)
    mpi.COMM_WORLD.Abort(code)


def _arm(code) -> None:
    if code is None or code == 0:
        return
    code = code if isinstance(code, int) else 1     # sys.exit("message") exits 1
    if not _state["armed"]:
        _state["armed"] = True
        # registered now, so it runs first (atexit is last in, first out), before any handler of the program's
        atexit.register(_abort, code)


_exit = sys.exit


def _sys_exit(code=None):
    _arm(code)
    _exit(code)


_excepthook = sys.excepthook


def _hook(kind, value, tb):
    if issubclass(kind, KeyboardInterrupt):
        _state["stopping"] = True
    _arm(1)
    _excepthook(kind, value, tb)


_signal = signal.signal


def _signal_signal(signum, handler):
    """The program's handler of a stop signal, noting first that the job is being stopped."""
    if signum in _STOP_SIGNALS and callable(handler):
        user = handler

        def handler(s, frame):  # noqa: F811 - the wrapper is the program's handler from now on
            _state["stopping"] = True
            return user(s, frame)

        handler.__wrapped__ = user
    return _signal(signum, handler)


def _chain() -> None:
    """The sitecustomize this file hides (the next one on sys.path), run as it would have been."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


sys.exit = _sys_exit
sys.excepthook = _hook
signal.signal = _signal_signal
try:
    _chain()
except Exception as exc:  # noqa: BLE001 - site would have printed and gone on; so do we
    print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}", file=sys.stderr)
