"""Per-rank wrapper: ``python -m mpirun_kit.rank -- PROGRAM [ARGS...]``; mpirun runs it as every rank.

It sits between the MPI daemon and the user's program so the master learns
what mpirun's own messages often lose: which rank on which host ended how
(exit code, or signal *name*), and when.  It

1. reports the rank's start and exit to the master's result channel
   (``MPIRUN_KIT_RESULT_ADDR`` = host:port, set by the plan), signed with this rank's own key,
   which it takes from the key file its host's entrypoint wrote (exec/channel/keys.py; the file's
   directory is found by ``MPIRUN_KIT_RUN_NONCE``, forwarded by ``-x NAME``) and removes before the
   program starts: the program never holds a key, neither in its environment nor in its parent's, and
   it starts only once every rank of its host took its own file.  The wrapper makes itself not dumpable
   (``PR_SET_DUMPABLE`` 0) before it reads its key, so a program of the same uid cannot read the key from
   its memory (``/proc/<pid>/mem``, ptrace) nor take its socket (``pidfd_getfd``); only CAP_SYS_PTRACE can
   (docs/threat-model.md);
2. forwards SIGTERM/SIGINT/SIGHUP to the program, and SIGTERMs it when the MPI
   daemon that started the rank dies (no orphaned ranks);
3. on the master's stop (a signed request on its channel connection, exec/channel/stop.py),
   signals the program and, once the program has ended and its exit is reported, holds its
   own exit until the master releases it (or the request's ``hold_s`` passes, a signal
   arrives, the channel closes): mpirun SIGKILLs every rank 1 s after any rank ends early,
   and the master lets it act only once every rank's handler is done (observe/relay.py);
4. exits the way the program did (same code; same signal, re-raised on itself), except
   when the master released it after its stop: then 0, since the master already has the
   program's exit from the report and mpirun need only end, not abort.

The rank number comes from the MPI's own variables; its host comes from the
plan's placement (``MPIRUN_KIT_HOSTS``), not from gethostname(), which on some
platforms is not the cluster name (plan/contract.py).  If ``mpirun_kit.rank.pinning`` is installed its
``apply_rank_pinning(environ)`` runs before the program starts.
"""
from __future__ import annotations

import importlib
import os
import signal
import sys
import time
from collections.abc import Callable  # not typing: every rank imports this module at start

# Only the stdlib and stdlib-only modules: every rank imports this at start, on the
# launch's critical path.  What it needs only once its key is taken (the channel link, the
# process runner, the relay) is imported then, while its host's other ranks take theirs
# (``load_the_rest``, issue 41).
from ..core.clock import SYSTEM_CLOCK, Deadline
from ..exec.channel.keys import KEY_WAIT_S, take_rank_key, wait_siblings
from ..exec.pdeathsig import set_parent_death_signal
from ..exec.signals import signal_name
from ..plan.contract import PINNING_VAR, RESULT_ADDR_VAR, RUN_NONCE_VAR, local_size_text, rank_identity

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def child_env(env: dict) -> dict:
    """The program's environment: torch-style names added where the user has not set them."""
    rank, host, local, size = rank_identity(env)
    out = dict(env)
    if rank >= 0:
        out.setdefault("RANK", str(rank))
        out.setdefault("LOCAL_RANK", str(local))
    if size:
        out.setdefault("WORLD_SIZE", str(size))
    local_size = local_size_text(env)
    if local_size:
        out.setdefault("LOCAL_WORLD_SIZE", local_size)
    if "SM_HOSTS" in env:
        # Forwarded from the master, SM_CURRENT_HOST would be wrong here; say where this rank is.
        out["SM_CURRENT_HOST"] = host
    return out


#: the directory whose sitecustomize.py makes a Python rank that exits failing abort the MPI job (pyhook/)
FAIL_FAST_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyhook")


def with_fail_fast(env: dict) -> dict:
    """The program's environment with pyhook/ first on PYTHONPATH: a Python rank that exits with a failing code
    (or an exception) while MPI is up aborts the job at once instead of waiting in MPI_Finalize for ranks that
    wait for it (pyhook/sitecustomize.py says how).  Programs that are not Python ignore the variable."""
    rest = env.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": FAIL_FAST_DIR + (os.pathsep + rest if rest else "")}


def apply_pinning(env: dict, dev: str = "/dev") -> tuple[dict, str]:
    """Run the pinning hook when its module exists; returns (env, what happened).

    Pinning places ranks on GPUs; with pinning off, or no NVIDIA driver on this host
    (no ``/dev/nvidiactl``), it would return nothing, so the module is not even
    imported: that saves ~0.1 s per rank on the launch path of CPU hosts.
    """
    if env.get(PINNING_VAR) == "none":
        return env, "off"
    if not os.path.exists(os.path.join(dev, "nvidiactl")):
        return env, "no GPU driver"
    try:
        mod = importlib.import_module("mpirun_kit.rank.pinning")
    except ModuleNotFoundError as exc:
        if exc.name == "mpirun_kit.rank.pinning":
            return env, "absent"
        raise
    hook = getattr(mod, "apply_rank_pinning", None)
    if hook is None:
        return env, "no apply_rank_pinning"
    returned = hook(env)
    if isinstance(returned, dict):
        env = {**env, **returned}
    return env, "applied"


def die_with_parent() -> None:
    """Get SIGTERM (forwarded to the program) when the MPI daemon that started this rank dies.

    mpirun/orted can die abruptly (SIGKILL, or a second SIGTERM, which makes mpirun
    exit at once without stopping its ranks); without this the ranks would run on
    as orphans (open-mpi/ompi #7790).
    """
    set_parent_death_signal(signal.SIGTERM, os.getppid())


def process_started(pid: int | str = "self") -> float | None:
    """When process ``pid`` started, in wall-clock seconds (Linux /proc: 10 ms ticks), or None.  The wrapper's
    own start and its parent's (the MPI daemon, or mpirun on its host) go into its start report: the launch
    timeline's "daemon up" and "wrapper started" per rank (observe/timeline.py)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def own_cpu_s() -> float:
    """This wrapper's own CPU time (user + system), its program's not included."""
    t = os.times()
    return t.user + t.system


PR_SET_DUMPABLE = 4


def set_not_dumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)``: no core dump, and no ptrace, ``/proc/<pid>/mem`` or ``pidfd_getfd`` on this
    process for anyone without CAP_SYS_PTRACE, same uid included.  Its program is dumpable again (execve resets
    it).  False where prctl is unavailable."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def load_the_rest() -> None:
    """Import what the wrapper needs only to start and follow its program: the channel link, the process runner,
    the relay.  ``channel_link`` runs it once this rank's key is taken, while the host's other ranks take theirs,
    so it is off the launch's critical path (issue 41); ``main`` runs it (again: then a no-op) in any case."""
    from ..exec.channel import rank_link  # noqa: F401  (imported for later, here)
    from ..exec import command  # noqa: F401
    from ..observe import ptracer, relay  # noqa: F401


def channel_link(env: dict, rank: int, host: str, wait_s: float = KEY_WAIT_S, clock=SYSTEM_CLOCK,
                 meanwhile: Callable[[], object] = load_the_rest) -> tuple[RankLink | None, str]:  # noqa: F821
    """(the rank's link to the result channel, "") or (None, why not: reports are then off).

    Takes this rank's key file (and removes it), runs ``meanwhile``, then waits until its host's other ranks
    took theirs, before the program starts (exec/channel/keys.py); both waits end at one deadline of ``wait_s``
    (``clock``).
    """
    addr, value = env.get(RESULT_ADDR_VAR), env.get(RUN_NONCE_VAR, "")
    if not addr:
        return None, ""
    nonce, at, keyed = value.partition("@")
    if len(nonce) != 32 or any(c not in "0123456789abcdef" for c in nonce):
        return None, f"{RUN_NONCE_VAR} is missing or not 32 hex digits: no reports to the master"
    if rank < 0:
        return None, "no rank number from the MPI: no reports to the master"
    if at and host not in keyed.split(","):
        return None, f"no entrypoint on {host} handed out keys before mpirun started: no reports to the master"
    deadline = Deadline(clock, wait_s)
    got = take_rank_key(nonce, host, rank, deadline, clock=clock)
    if got is None:
        return None, (f"no key file for rank {rank} of run {nonce} on {host} within {wait_s:g} s (a 0700 directory "
                      "of this uid, written by this host's entrypoint): no reports to the master")
    key, job, directory = got
    meanwhile()
    left = wait_siblings(directory, deadline, clock)
    if left:
        # Never start the program while a sibling's key is on disk: it could read it and report for that rank
        # (issue #39).  Hold until they took theirs; if one never does, the job stops (mpirun's SIGTERM, or
        # our parent's death: die_with_parent), which ends this wait.
        print(f"mpirun_kit.rank: rank {rank} on {host}: {len(left)} other rank(s) of this host did not take their "
              f"key file within {wait_s:g} s ({', '.join(sorted(left)[:4])}); the program waits until they have "
              "(started now, it could read their keys)", file=sys.stderr, flush=True)
        wait_siblings(directory, Deadline(clock, None), clock)
    from ..exec.channel.rank_link import RankLink

    return RankLink(addr, rank, key, job), ""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m mpirun_kit.rank -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    die_with_parent()
    env = with_fail_fast(child_env(dict(os.environ)))
    rank, host, local, _ = rank_identity(env)
    set_not_dumpable()      # before the key is read: nothing of this process's memory is readable from then on
    link, why_not = channel_link(env, rank, host)
    key_taken = time.time()
    load_the_rest()
    if why_not:
        print(f"mpirun_kit.rank: rank {rank} on {host}: {why_not}", file=sys.stderr, flush=True)

    def early_exit(code: int, why: str) -> int:
        print(f"mpirun_kit.rank: rank {rank} on {host}: {why}", file=sys.stderr, flush=True)
        if link is not None:
            link.send({"event": "exit", "rank": rank, "host": host, "exit_code": code, "signal": None,
                       "t": time.time()})
        return code

    from ..errors import MpirunKitError

    try:
        env, _ = apply_pinning(env)
    except MpirunKitError as exc:
        return early_exit(exc.exit_code, f"pinning failed: {exc}")
    # Handlers go in before the program starts: a SIGTERM that arrives while it is being
    # started is held and delivered to it, instead of killing this wrapper and orphaning it.
    held: list[int] = []
    child = None        # the program's Popen, once started
    signals_seen = [0]      # a signal that reaches this wrapper ends a hold (observe/relay.py)

    def forward(signum, frame):
        signals_seen[0] += 1
        if child is None:
            held.append(signum)
            return
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for s in FORWARDED:
        signal.signal(s, forward)
    # Progress and stacks (observe/relay.py): the program writes steps to a pipe; this wrapper signs them.
    from ..exec.command import spawn
    from ..observe import ptracer, relay

    env, progress_r, progress_w, stack_file = relay.prepare(env)
    started = time.time()
    try:
        # Under Yama's ptrace_scope 1 the relay's stack readers (this wrapper's children) may trace the program
        # only if it names this wrapper its tracer before exec (observe/ptracer.py); elsewhere it starts as is.
        child = spawn(ptracer.argv(argv, os.getpid(), ptracer.scope(), env.get("PATH", os.defpath)),
                      env=env, pass_fds=(progress_w,))
    except OSError as exc:
        return early_exit(127, f"cannot start {argv[0]!r}: {exc.strerror}")
    finally:
        os.close(progress_w)
    cpu_to_program = own_cpu_s()
    for signum in held:
        child.send_signal(signum)
    # The start is reported once the program runs, not before: connecting to the master is off the
    # program's path.  "t" is when it was started; "program_pid" shows the report came after.  The launch's
    # account (observe/timeline.py): when this wrapper and its parent (the MPI daemon) started, when it had
    # its key (and its siblings theirs), and the CPU it spent from its exec to its program's.
    if link is not None:
        stamps = {k: v for k, v in (("proc_t", process_started()), ("parent_t", process_started(parent)))
                  if v is not None}
        link.send({"event": "start", "rank": rank, "host": host, "local_rank": local,
                   "pid": os.getpid(), "program_pid": child.pid, "t": started, **stamps,
                   "key_t": key_taken, "cpu_s": cpu_to_program})
    seen_at_stop = [0]

    def stop_program(signum: int) -> None:
        # The master's stop (relay thread): only signals that come after it end the hold.
        seen_at_stop[0] = signals_seen[0]
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    watcher = relay.Relay(link, {"rank": rank, "host": host}, progress_r, stack_file).start(
        child.pid, stop_program)
    status = child.wait()
    watcher.stop()
    sig = -status if status < 0 else None
    if link is not None:
        if link.send({"event": "exit", "rank": rank, "host": host, "exit_code": None if sig else status,
                      "signal": signal_name(sig) if sig else None, "t": time.time(),
                      # the account: this wrapper's whole CPU, and when its channel connection was greeted
                      "cpu_s": own_cpu_s(), **({"hello_t": link.connected_at} if link.connected_at else {})}):
            # During the master's stop, mpirun must not see this rank end while others still run their handlers.
            held = watcher.hold(lambda: signals_seen[0] > seen_at_stop[0] or os.getppid() != parent)
            link.close()
            if held == "released":
                # The master asked for this stop and has the program's real exit (the report above); an exit
                # of 0 lets mpirun end normally.  A signal or a failing code would start mpirun's abort, which
                # sleeps its 1-s kill timeout and, on Open MPI 4.1, once crashed in PMIx_Finalize.
                return 0
    if sig:
        # Die the same way, so mpirun reports the real signal too.
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # these two cannot (and need not) be reset
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                return 128 + sig
        os.kill(os.getpid(), sig)
        return 128 + sig
    return status
