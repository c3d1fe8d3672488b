"""Rank-side distributed set-up: launcher environment -> DistInfo -> torch.distributed.

``read_dist_env(environ)`` is pure: it reads rank / world size / local rank from Open MPI
(``OMPI_COMM_WORLD_*``), MPICH/Intel MPI (``PMI_RANK``/``PMI_SIZE``, ``MPI_LOCALRANKID``) or
torchrun (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``), in that order, and the rendezvous address from
``MASTER_ADDR``/``MASTER_PORT`` or the launcher's ``MPIRUN_KIT_MASTER_ADDR`` (host[:port]).  When
an MPI launch provides no address, ``init_distributed`` has rank 0 pick one and broadcasts it
over MPI (mpi4py), so a bare ``mpirun -np N python -m mpirun_kit.maskrcnn.train`` works.
Backends: gloo on CPU, NCCL on GPU, or Horovod when asked for and installed.
``match_grad_strides`` lays parameters out as their gradients come back, so DDP's bucket views
take gradients without a copy.  ``end_process(main)`` is how a rank's process ends: with main's exit code, without interpreter
finalization (its docstring says why).
"""
from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import traceback
from dataclasses import dataclass
from typing import Callable, Mapping, NoReturn

from ..errors import LaunchError, SpecError

log = logging.getLogger(__name__)

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    #: which launcher's variables were found: "openmpi", "pmi", "torchrun" or "none"
    launcher: str = "none"

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _int(env: Mapping[str, str], name: str) -> int:
    raw = env[name]
    try:
        return int(raw)
    except ValueError:
        raise SpecError(f"environment variable {name}={raw!r}: expected an integer "
                        "(set by the launcher: mpirun, mpiexec or torchrun)") from None


def read_dist_env(environ: Mapping[str, str]) -> DistInfo:
    """Parse the launcher's variables; no variables at all means a single process."""
    if "OMPI_COMM_WORLD_RANK" in environ:
        launcher, rank, size = "openmpi", _int(environ, "OMPI_COMM_WORLD_RANK"), _int(environ, "OMPI_COMM_WORLD_SIZE")
        local = _int(environ, "OMPI_COMM_WORLD_LOCAL_RANK") if "OMPI_COMM_WORLD_LOCAL_RANK" in environ else 0
        local_size = _int(environ, "OMPI_COMM_WORLD_LOCAL_SIZE") if "OMPI_COMM_WORLD_LOCAL_SIZE" in environ else size
    elif "PMI_RANK" in environ:
        launcher, rank, size = "pmi", _int(environ, "PMI_RANK"), _int(environ, "PMI_SIZE")
        local = _int(environ, "MPI_LOCALRANKID") if "MPI_LOCALRANKID" in environ else 0
        local_size = _int(environ, "MPI_LOCALNRANKS") if "MPI_LOCALNRANKS" in environ else size
    elif "RANK" in environ and "WORLD_SIZE" in environ:
        launcher, rank, size = "torchrun", _int(environ, "RANK"), _int(environ, "WORLD_SIZE")
        local = _int(environ, "LOCAL_RANK") if "LOCAL_RANK" in environ else 0
        local_size = _int(environ, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in environ else size
    else:
        return DistInfo()
    if not 0 <= rank < size:
        raise SpecError(f"rank {rank} is outside world size {size} ({launcher} variables); "
                        "expected 0 <= rank < size: check the launcher command")
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if not addr and environ.get("MPIRUN_KIT_MASTER_ADDR"):
        addr, _, p = environ["MPIRUN_KIT_MASTER_ADDR"].partition(":")
        port = port or p or None
    return DistInfo(rank, size, local, local_size, addr or None,
                    _int({"MASTER_PORT": port}, "MASTER_PORT") if port else None, launcher)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def resolve_rendezvous(info: DistInfo) -> DistInfo:
    """Fill in a missing master address/port; over MPI, rank 0 chooses and broadcasts."""
    if not info.distributed or (info.master_addr and info.master_port):
        return info
    if info.launcher in ("openmpi", "pmi"):
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        choice = None
        if info.rank == 0:
            # all ranks on this host: loopback; otherwise this host's name, which the others resolve
            host = info.master_addr or ("127.0.0.1" if info.local_size == info.world_size else socket.getfqdn())
            choice = (host, info.master_port or _free_port("127.0.0.1" if host == "127.0.0.1" else ""))
        host, port = comm.bcast(choice, root=0)
        return DistInfo(info.rank, info.world_size, info.local_rank, info.local_size, host, port, info.launcher)
    raise LaunchError(f"rank {info.rank} of {info.world_size} ({info.launcher}) has no rendezvous address; "
                      "expected MASTER_ADDR and MASTER_PORT (or MPIRUN_KIT_MASTER_ADDR=host:port) in the environment")


def init_distributed(info: DistInfo, device_type: str, backend: str = "auto", timeout_s: float = 1800.0):
    """Initialise torch.distributed (or Horovod); returns the backend name used ("none" if single).

    Raises:
        LaunchError: Horovod asked for but not installed, or the process group could not form.
    """
    if backend == "horovod":
        try:
            import horovod.torch as hvd
        except ImportError as exc:
            raise LaunchError("backend=horovod but horovod.torch is not importable; install the optional "
                              "extra (WITH_HOROVOD=1 bash ops/quickstart.sh setup) or use backend=auto") from exc
        hvd.init()
        return "horovod"
    if not info.distributed:
        return "none"
    import datetime

    import torch.distributed as dist

    name = backend if backend != "auto" else ("nccl" if device_type == "cuda" else "gloo")
    info = resolve_rendezvous(info)
    try:
        dist.init_process_group(name, init_method=f"tcp://{info.master_addr}:{info.master_port}",
                                rank=info.rank, world_size=info.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
    except (RuntimeError, ValueError) as exc:
        raise LaunchError(f"rank {info.rank}: could not join the {name} process group at "
                          f"{info.master_addr}:{info.master_port} ({exc}); check that the master is reachable") from exc
    log.info("rank %d/%d joined %s at %s:%s", info.rank, info.world_size, name, info.master_addr, info.master_port)
    return name


class Comm:
    """The few collectives the trainer needs, over torch.distributed, Horovod, or nothing.

    ``backend`` is what ``init_distributed`` returned: "none", "gloo", "nccl" or "horovod".
    These are control-plane messages (a stop flag, logged losses, results): with NCCL they go
    over a separate gloo group on CPU tensors, so they never force a GPU synchronisation.
    """

    def __init__(self, backend: str, rank: int, world_size: int):
        self.backend, self.rank, self.world_size = backend, rank, world_size
        self.group = None
        if backend == "nccl":
            import torch.distributed as dist

            self.group = dist.new_group(backend="gloo")

    def allreduce_sum(self, t):
        """Sum of ``t`` over ranks (a new tensor; ``t`` may be on any device)."""
        if self.backend == "none":
            return t
        if self.backend == "horovod":
            import horovod.torch as hvd

            return hvd.allreduce(t, op=hvd.Sum)
        import torch.distributed as dist

        t = t.detach().cpu().clone()
        dist.all_reduce(t, group=self.group)
        return t

    def gather_object(self, obj):
        """Rank 0 gets the list of every rank's ``obj``; the others get None."""
        if self.backend == "none":
            return [obj]
        if self.backend == "horovod":
            import horovod.torch as hvd

            out = hvd.allgather_object(obj)
            return out if self.rank == 0 else None
        import torch.distributed as dist

        out = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self.group)
        return out

    def broadcast_object(self, obj):
        if self.backend == "none":
            return obj
        if self.backend == "horovod":
            import horovod.torch as hvd

            return hvd.broadcast_object(obj, root_rank=0)
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def barrier(self) -> None:
        if self.backend == "none":
            return
        if self.backend == "horovod":
            import horovod.torch as hvd

            hvd.barrier()
            return
        import torch.distributed as dist

        dist.barrier(group=self.group)

    def shutdown(self) -> None:
        if self.backend in ("gloo", "nccl"):
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def match_grad_strides(named_params, loss: Callable[[], object]) -> tuple[list[str], list[str]]:
    """Give each parameter the strides its gradient comes back in, before DDP builds its buckets.

    DDP lays each bucket view out with its parameter's strides and copies every gradient whose
    strides differ into it, each step ("Grad strides do not match bucket view strides").  Under
    channels-last a 1x1 conv weight [O, C, 1, 1] has two valid stride sets, and which one its
    gradient takes depends on the backend and on the graph: a weight used once gets the
    convolution's own layout, one used on every FPN level (the RPN head) the layout of the sum
    autograd forms (issue #36 saw the copy on a GPU for a [12, 256, 1, 1] weight).  So this runs
    ``loss()`` backward twice on the real model: the first pass restrides every parameter whose
    gradient differs (same values, new strides), the second checks.  Returns (restrided names,
    names still differing after the second pass).  Leaves every ``.grad`` None.
    """
    import torch

    params = [(n, p) for n, p in named_params if p.requires_grad]

    def differing() -> list[tuple[str, torch.nn.Parameter]]:
        for _, p in params:
            p.grad = None
        loss().backward()
        out = [(n, p) for n, p in params if p.grad is not None and p.grad.shape == p.shape
               and p.grad.stride() != p.stride()]
        return out

    first = differing()
    with torch.no_grad():
        for _, p in first:
            p.data = torch.empty_strided(p.shape, p.grad.stride(), dtype=p.dtype, device=p.device).copy_(p.data)
    second = differing()
    for _, p in params:
        p.grad = None
    return [n for n, _ in first], [n for n, _ in second]


def end_process(main: Callable[[], int | None]) -> NoReturn:
    """Run a rank's ``main`` and end the process with its exit code, skipping interpreter finalization.

    Why: torch's Gloo worker threads outlive ``destroy_process_group`` (a DDP model keeps the group
    alive in C++), and one that releases a finished collective's tensor while the interpreter
    finalizes must take the GIL, which CPython refuses it then: the thread unwinds through C++
    that cannot unwind and the rank aborts (SIGABRT, exit 134 instead of its own code;
    pytorch/pytorch#190489).  That turned a spot-interruption stop (143) into a crash in CI.

    What still runs, in order: the ``atexit`` handlers (logging's flush, multiprocessing's join of
    DataLoader workers, Horovod's shutdown; the threads can still take the GIL here),
    ``MPI_Finalize`` when mpi4py initialised MPI (mpi4py would call it during finalization; without
    it mpirun reports the rank "exited improperly"), a flush of stdout and stderr.  ``SystemExit``
    becomes its code (a message goes to stderr, code 1); another exception prints its traceback, 1.
    """
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code
    except Exception:
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    # only a look-up: a rank that never touched MPI must not initialise it just to finalise it
    mpi = sys.modules.get("mpi4py.MPI")
    up = mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    if up and code not in (0, 129, 130, 143):   # fail fast: ranks waiting for this one would wait in
        mpi.COMM_WORLD.Abort(code)              # MPI_Finalize for ever (a stop's 128+N is no failure; issue #40)
    if up:
        mpi.Finalize()
    os._exit(code)
