"""A program's stacks read from outside, and what they say: where it waits, and a signature of it.

Place in the data flow: the rank wrapper's relay thread (observe/relay.py) reads its program's stacks
with these functions, without the program's help (the wrapper is its parent, so ptrace is allowed):

* ``py-spy dump --native --locals --json`` for Python programs: Python frames with native frames
  between them (``PMPI_Barrier``, ``ompi_mpi_finalize``, NCCL waits) and each Python frame's locals;
* ``eu-stack`` (elfutils), else ``gdb``, for what py-spy cannot read: a program that is not Python,
  or a Python program whose interpreter is already finalizing (``sys.exit`` running ``MPI_Finalize``
  from an exit hook tears the interpreter down first, and py-spy then finds no interpreter).

``classify`` says where a stack waits (``state``: ``finalize``, ``collective``, ``run``; and the MPI call)
for the master's hang report (observe/hang.py) as well; ``signature`` is a short hash of the main
thread's frames and, for Python, its frames' locals, so a loop that passes the same line again with a
new counter is seen to advance.  ``finish_exit`` ends a program stuck in ``MPI_Finalize`` after it has
called exit (gdb pops the finalize frame; the program's own exit then runs with its own code).

Stdlib only: every rank imports it at start.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys

from ..exec.command import run

#: how long one stack read may take.
READ_TIMEOUT_S = 8.0
#: frames kept per thread (a reply must fit one channel line).
MAX_THREADS, MAX_FRAMES = 16, 40

#: native and Python frame names that mean "inside MPI's finalize" (Open MPI, MPICH, mpi4py's Python API).
FINALIZE_NAMES = frozenset({"MPI_Finalize", "PMPI_Finalize", "ompi_mpi_finalize", "MPID_Finalize",
                            "MPII_Finalize", "Finalize"})
#: frames that mean "the program is exiting": CPython's exit paths and the C library's.
EXIT_NAMES = frozenset({"Py_Exit", "Py_FinalizeEx", "Py_Finalize", "exit", "__run_exit_handlers",
                        "_PyRuntime_Finalize", "call_ll_exitfuncs", "_exit"})
#: an MPI or NCCL collective, native (PMPI_Allreduce, ncclAllReduce) or mpi4py's Python/Cython name.
_COLLECTIVE = re.compile(
    r"^(?:P?MPI_|MPIX_)?(?P<op>I?(?:Barrier|Allreduce|Reduce|Bcast|Allgatherv?|Gatherv?|Scatterv?|Alltoallv?|"
    r"Reduce_scatter(?:_block)?|Scan|Exscan|allreduce|reduce|bcast|allgather|gather|scatter|alltoall|barrier))$"
    r"|^nccl(?P<nccl>AllReduce|Broadcast|Reduce|AllGather|ReduceScatter|Send|Recv|GroupEnd)$"
    r"|^(?P<torch>all_reduce|all_gather|broadcast|reduce_scatter|barrier|all_to_all)(?:_single|_into_tensor)?$")
#: point-to-point waits: a rank blocked here waits for a partner, not the whole job.
_P2P = re.compile(r"^(?:P?MPI_)?(?:Recv|Send|Ssend|Wait|Waitall|Probe|Sendrecv|recv|send|wait|probe)$")


def _name(frame: dict) -> str:
    return str(frame.get("name", "")).split("(")[0].strip()


def classify(frames: list[dict]) -> tuple[str, str]:
    """(state, call) of one thread's frames, innermost first.

    state: ``finalize`` (inside MPI's finalize; ``call`` is ``exit`` when an exit path is below it, the
    program having called exit, else ``finalize``), ``collective`` (``call`` names it, e.g. ``Barrier``),
    ``p2p`` (a point-to-point wait), ``run`` (none of these; ``call`` is the innermost frame's name), or
    ``unknown`` (no frames).
    """
    if not frames:
        return "unknown", ""
    names = [_name(f) for f in frames]
    for i, n in enumerate(names):
        if n in FINALIZE_NAMES:
            return "finalize", "exit" if any(m in EXIT_NAMES for m in names[i + 1:]) else "finalize"
    for n in names:
        m = _COLLECTIVE.match(n)
        if m:
            op = m.group("op") or m.group("nccl") or m.group("torch")
            return "collective", op[0].upper() + op[1:]
    for n in names:
        if _P2P.match(n):
            return "p2p", n.removeprefix("PMPI_").removeprefix("MPI_")
    return "run", names[0]


def where(frames: list[dict]) -> str:
    """The innermost frame that has a source line (the program's own code), as ``name (file:line)``."""
    for f in frames:
        if f.get("line"):
            return f"{f['name']} ({os.path.basename(str(f['file']))}:{f['line']})"
    for f in frames:       # native frames only: the MPI call it waits in says the most
        if _name(f) in FINALIZE_NAMES or _COLLECTIVE.match(_name(f)) or _P2P.match(_name(f)):
            return f"{f['name']} ({os.path.basename(str(f['file']))})"
    return f"{frames[0]['name']} ({os.path.basename(str(frames[0]['file']))})" if frames else "?"


def stable_frames(frames: list[dict]) -> list[dict]:
    """The frames that stay put while a program waits: from the MPI call it waits in outwards (inside it, MPI's
    progress loop spins through ever other functions), else every frame with a name (a bare address is
    wherever a spinning loop happened to be)."""
    for i, f in enumerate(frames):
        n = _name(f)
        if n in FINALIZE_NAMES or _COLLECTIVE.match(n) or _P2P.match(n):
            return frames[i:]
    return [f for f in frames if not _name(f).startswith("0x")]


def telling_frames(frames: list[dict]) -> list[dict]:
    """The frames a report shows: the innermost, every frame with a source line (the program's own code),
    and the native frames that name an MPI call or an exit path; the rest (MPI's progress loop, the
    interpreter's own frames) only hide the program's frames."""
    first = next((i for i, f in enumerate(frames) if not _name(f).startswith("0x")), 0)
    return [f for i, f in enumerate(frames)
            if i == first or f.get("line") or _name(f) in FINALIZE_NAMES or _name(f) in EXIT_NAMES
            or _COLLECTIVE.match(_name(f)) or _P2P.match(_name(f))]


def signature(frames: list[dict], local_values: list[str] = ()) -> str:
    """16 hex digits naming this place: the stable frames (name, file, line) and the locals' values."""
    h = hashlib.sha256()
    for f in stable_frames(frames):
        h.update(f"{f.get('name')}\0{f.get('file')}\0{f.get('line')}\n".encode(errors="replace"))
    for v in local_values:
        h.update(v.encode(errors="replace") + b"\n")
    return h.hexdigest()[:16]


def find_tool(name: str, path_var: str) -> str | None:
    """``name`` next to this Python (a venv's bin/), in an absolute entry of ``path_var`` (the wrapper's PATH;
    relative entries name whatever directory the wrapper runs in, and these tools trace the program: they
    are skipped), or in /usr/bin."""
    for d in [os.path.dirname(sys.executable), *path_var.split(os.pathsep), "/usr/bin", "/bin"]:
        if not os.path.isabs(d):
            continue
        path = os.path.join(d, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _run(argv: list[str], timeout: float) -> tuple[int, str, str]:
    try:
        p = run(argv, timeout_s=timeout)
    except TimeoutError:
        return -1, "", f"{os.path.basename(argv[0])} took longer than {timeout:g} s"
    except OSError as exc:
        return -1, "", f"{os.path.basename(argv[0])} failed: {exc.strerror}"
    return p.returncode, p.stdout, p.stderr


def pyspy_threads(pyspy: str, pid: int, *, native: bool = True, local_values: bool = False,
                  timeout: float = READ_TIMEOUT_S) -> tuple[list[dict], str]:
    """(threads, "") from py-spy, main thread first, each ``{"thread", "main", "frames", "locals"}``;
    or ([], why not)."""
    argv = [pyspy, "dump", "--pid", str(pid), "--json"] + (["--native"] if native else []) \
        + (["--locals"] if local_values else [])
    rc, out, err = _run(argv, timeout)
    if rc != 0:
        lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith(" ")]
        return [], f"py-spy exited {rc}: {(lines[0] if lines else err.strip())[-200:]}"
    try:
        raw = json.loads(out)
        threads = []
        for th in raw[:MAX_THREADS]:
            frames, values = [], []
            for f in th.get("frames", [])[:MAX_FRAMES]:
                frames.append({"name": str(f.get("name", "?"))[:120], "file": str(f.get("filename", "?"))[-200:],
                               "line": int(f.get("line") or 0)})
                for v in f.get("locals") or ():
                    values.append(f"{v.get('name')}={str(v.get('repr'))[:200]}")
            main = th.get("os_thread_id") == th.get("pid") or th.get("thread_name") == "MainThread"
            name = th.get("thread_name") or ("MainThread" if main else None)
            threads.append({"thread": str(name or th.get("thread_id"))[:80], "main": bool(main), "frames": frames,
                            "locals": values})
    except (ValueError, TypeError, AttributeError) as exc:
        return [], f"py-spy's output was not understood ({exc})"
    threads.sort(key=lambda t: not t["main"])
    return threads, ""


_EU_FRAME = re.compile(r"^#\d+\s+0x[0-9a-f]+\s*(?P<name>\S+)?(?:\s+-\s+(?P<file>\S+))?")
_GDB_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(?P<name>[^\s(]+)\s*\((?P<args>[^)]*)\)"
                        r"(?:\s+(?:at|from)\s+(?P<file>\S+?)(?::(?P<line>\d+))?)?\s*$")


def native_threads(pid: int, path_var: str, timeout: float = READ_TIMEOUT_S) -> tuple[list[dict], str, str]:
    """(main thread's native frames as one thread, "" or why not, how) from eu-stack, else gdb."""
    eu = find_tool("eu-stack", path_var)
    if eu:
        rc, out, err = _run([eu, "-p", str(pid), "-1", "-m"], timeout)   # -1: the main thread; -m: modules
        frames = []
        for line in out.splitlines():
            m = _EU_FRAME.match(line.strip())
            if m:
                frames.append({"name": (m.group("name") or "??")[:120],
                               "file": os.path.basename(m.group("file") or "")[-200:], "line": 0})
        if frames:
            return [{"thread": "main", "main": True, "frames": frames[:MAX_FRAMES], "locals": []}], "", "eu-stack"
        why = f"eu-stack exited {rc}: {err.strip()[-200:]}"
    else:
        why = "eu-stack is not installed"
    gdb = find_tool("gdb", path_var)
    if gdb is None:
        return [], why + "; gdb is not installed (apt-get install elfutils gdb)", "none"
    rc, out, err = _run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", f"bt {MAX_FRAMES}"], timeout)
    frames = []
    for line in out.splitlines():
        m = _GDB_FRAME.match(line.strip())
        if m:
            frames.append({"name": m.group("name")[:120], "file": (m.group("file") or "")[-200:],
                           "line": int(m.group("line") or 0)})
    if frames:
        return [{"thread": "main", "main": True, "frames": frames, "locals": []}], "", "gdb"
    return [], f"{why}; gdb exited {rc}: {err.strip()[-200:]}", "none"


def io_counters(pid: int) -> tuple[int, int] | None:
    """(bytes read, bytes written) by ``pid`` through system calls so far (its output, files, sockets; not
    shared memory), or None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/io") as f:
            fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        return int(fields["rchar"]), int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return None


def wakeups(pid: int) -> int | None:
    """How often ``pid``'s main thread went to sleep and woke (voluntary context switches), or None.  A rank
    blocked for good (a sleep, a lock, a read) wakes no more; a loop that sleeps or blocks between steps
    does, whatever its stack looks like when sampled.  (An MPI wait spins through sched_yield and wakes all the
    time: only stacks outside MPI count it.)"""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


#: gdb's Python: find the finalize frame, read the exit code CPython passed to Py_Exit (or Py_RunMain's,
#: where debug information has it), and pop the finalize frame unless the code is known to be 0.
_GDB_FINISH = r"""
import gdb, json
FIN = {fin}
code = None
fin = None
f = gdb.newest_frame()
while f is not None:
    n = f.name() or ''
    if fin is None and n in FIN:
        fin = f
    if code is None and fin is not None and n in ('Py_Exit', 'Py_RunMain'):
        try:
            code = int(f.read_var('sts' if n == 'Py_Exit' else 'exitcode'))
        except Exception:
            pass
    f = f.older()
done = False
if fin is not None and code != 0:
    fin.select()
    try:
        gdb.execute('return (int)0', to_string=True)
        done = True
    except gdb.error as e:
        print('MPIRUN_KIT_FINISH_ERROR ' + str(e))
print('MPIRUN_KIT_FINISH ' + json.dumps({{'found': fin is not None, 'code': code, 'returned': done}}))
"""


def finish_exit(pid: int, path_var: str, timeout: float = 30.0) -> tuple[dict, str]:
    """Let a program that called exit leave ``MPI_Finalize``: ({"found", "code", "returned"}, "") or ({}, why not).

    gdb pops the finalize frame (it returns 0 to its caller), so the program's own exit goes on and ends
    the process with the code it asked for; ``code`` is that code when CPython's debug information shows it.
    With the code known to be 0 nothing is changed (a rank that ended well is a hang's suspect, not a failure).
    """
    gdb = find_tool("gdb", path_var)
    if gdb is None:
        return {}, "gdb is not installed (apt-get install gdb)"
    script = _GDB_FINISH.format(fin=repr(sorted(FINALIZE_NAMES - {"Finalize"})))
    rc, out, err = _run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set confirm off",
                         "-ex", f"python exec({script!r})"], timeout)
    for line in out.splitlines():
        if line.startswith("MPIRUN_KIT_FINISH "):
            try:
                return json.loads(line.split(" ", 1)[1]), ""
            except ValueError:
                break
    return {}, f"gdb exited {rc}: {(err or out).strip()[-200:]}"
