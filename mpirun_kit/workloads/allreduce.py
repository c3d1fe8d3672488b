"""All-reduce across a job's ranks: bus bandwidth, and a check of the reduced values.

One workload, two ways to start it:

* as a job (what jobs/allreduce-bench.yaml runs): mpirun starts it on every rank
  through the rank wrapper; rank and world come from the MPI environment
  (mpi4py).  With ``--backend mpi`` it all-reduces numpy buffers with MPI itself;
  with ``gloo``/``nccl`` (``auto``: nccl when CUDA is there, else gloo) it
  rendezvouses torch.distributed through MPI (rank 0 broadcasts its address and a
  free port), which is how the training module communicates.  Every rank checks
  the reduced values (the sum of 1..world), so a wrong result fails the job
  (exit 3).  Rank 0 prints::

    allreduce backend=gloo world=6 hosts=3 bytes=1048576 iters=20 time_ms=1.234 algbw_GBps=0.85 busbw_GBps=1.41
    allreduce check ok world=6 expected=21.0

* as the doctor's smoke test (``--rank N --world-size W --master HOST --port P``,
  argv from ``worker_argv``): doctor/coordinate.py starts one per rank on every
  host without MPI; torch.distributed rendezvouses at ``--master:--port``, NCCL
  when this rank sees a GPU, else gloo.  Every wait is bounded by ``--timeout``
  (torch.distributed's own timeout covers the rendezvous and each collective),
  and rank 0 prints one ``MPIRUN_KIT_ALLREDUCE {json}`` line that
  doctor.checks.check_allreduce turns into the ``allreduce`` row.

Bus bandwidth follows nccl-tests: algbw = bytes / time, busbw = algbw * 2(n-1)/n,
the figure comparable across world sizes (``bus_bandwidth``, used by both).
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from datetime import timedelta

CHECK_FAILED = 3
MODULE = "mpirun_kit.workloads.allreduce"
#: marker in front of the smoke test's JSON line (rank 0), so stray library output is never parsed.
RESULT_PREFIX = "MPIRUN_KIT_ALLREDUCE "


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("auto", "mpi", "gloo", "nccl"), default="auto")
    p.add_argument("--sizes", default="1M", help="comma-separated message sizes in bytes (K/M/G suffixes), e.g. 64K,1M,16M")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations per size")
    smoke = p.add_argument_group("smoke test without MPI (what `mpirun_kit doctor` starts on each host)")
    smoke.add_argument("--rank", type=int, help="this rank; with it, rendezvous at --master:--port")
    smoke.add_argument("--world-size", type=int)
    smoke.add_argument("--local-rank", type=int, default=0)
    smoke.add_argument("--master", help="rank 0's host name or address")
    smoke.add_argument("--port", type=int)
    smoke.add_argument("--bytes", type=int, default=8 << 20)
    smoke.add_argument("--timeout", type=float, default=60.0, help="seconds for the rendezvous and each collective")
    a = p.parse_args(argv)
    if a.rank is not None and (a.world_size is None or a.master is None or a.port is None):
        p.error("--rank needs --world-size, --master and --port")
    return a


def worker_argv(python: str, *, rank: int, world_size: int, local_rank: int, master: str, port: int,
                nbytes: int, iters: int, timeout_s: float) -> list[str]:
    """argv for one rank of the smoke test (pure; the doctor runs it locally or over ssh)."""
    return [python, "-m", MODULE, "--rank", str(rank), "--world-size", str(world_size),
            "--local-rank", str(local_rank), "--master", master, "--port", str(port), "--bytes", str(nbytes),
            "--iters", str(iters), "--timeout", f"{timeout_s:g}"]


def parse_result(output: str) -> dict | None:
    """Rank 0's smoke-test result from its output, or None when it printed none."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_PREFIX):
            try:
                return json.loads(line[len(RESULT_PREFIX):])
            except json.JSONDecodeError:
                return None
    return None


def parse_size(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    try:
        return int(float(t[:-1]) * mult[t[-1]]) if t and t[-1] in mult else int(t)
    except ValueError:
        raise SystemExit(f"allreduce: size {text!r} is not a size; expected bytes like 65536, 64K or 1M") from None


def bus_bandwidth(nbytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algorithm bandwidth, bus bandwidth) in GB/s for one allreduce of ``nbytes``.

    Bus bandwidth is the nccl-tests figure: algbw * 2(n-1)/n, the bytes each link
    carries in a ring allreduce, comparable across world sizes.  (0, 0) when no time passed.
    """
    if seconds <= 0 or world_size < 1:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    return _smoke(args) if args.rank is not None else _job(args)


def _job(args: argparse.Namespace) -> int:
    """Every size, timed across the MPI job's ranks (rank and world from mpi4py)."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    hosts = len(set(comm.allgather(socket.gethostname())))
    backend = args.backend
    torch = dist = None
    if backend != "mpi":
        import torch
        import torch.distributed as dist

        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if rank == 0:
            with socket.socket() as s:
                s.bind(("", 0))
                addr = (socket.gethostname(), s.getsockname()[1])
        else:
            addr = None
        host, port = comm.bcast(addr, root=0)
        dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world)
    device = None
    if backend == "nccl":
        import os

        from ..plan.contract import local_rank_of

        local = (local_rank_of(os.environ) or (0, 1))[0]
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    expected = world * (world + 1) / 2
    ok = True
    for size in [parse_size(s) for s in args.sizes.split(",") if s.strip()]:
        n = max(size // 4, 1)

        if backend == "mpi":
            send = np.full(n, rank + 1, dtype=np.float32)
            recv = np.empty_like(send)

            def once():
                comm.Allreduce(send, recv, op=MPI.SUM)
                return recv
        else:
            buf = torch.empty(n, dtype=torch.float32, device=device)

            def once():
                buf.fill_(rank + 1)
                dist.all_reduce(buf)
                if device is not None:
                    torch.cuda.synchronize()
                return buf
        for _ in range(args.warmup):
            once()
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            out = once()
        elapsed = (time.perf_counter() - t0) / max(args.iters, 1)
        elapsed = comm.allreduce(elapsed, op=MPI.MAX)  # the slowest rank bounds the collective
        got = float(out[0]) if backend == "mpi" else float(out[0].item())
        good = got == expected and (float(out[-1]) if backend == "mpi" else float(out[-1].item())) == expected
        ok = comm.allreduce(good, op=MPI.LAND) and ok
        alg, bus = bus_bandwidth(n * 4, elapsed, world)
        if rank == 0:
            print(f"allreduce backend={backend} world={world} hosts={hosts} bytes={n * 4} iters={args.iters} "
                  f"time_ms={elapsed * 1e3:.3f} algbw_GBps={alg:.3f} busbw_GBps={bus:.3f}", flush=True)
    if rank == 0:
        print(f"allreduce check {'ok' if ok else 'FAILED'} world={world} expected={expected}", flush=True)
    if dist is not None:
        dist.destroy_process_group()
    return 0 if ok else CHECK_FAILED


def _smoke(a: argparse.Namespace) -> int:
    """One rank of the doctor's smoke test: rendezvous at --master:--port, check once, time --iters."""
    import torch
    import torch.distributed as dist

    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    device = torch.device("cuda", a.local_rank % max(torch.cuda.device_count(), 1)) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://{a.master}:{a.port}", rank=a.rank,
                            world_size=a.world_size, timeout=timedelta(seconds=a.timeout))
    try:
        x = torch.ones(max(a.bytes // 4, 1), dtype=torch.float32, device=device)
        dist.all_reduce(x)  # warm-up: connections are set up lazily on the first collective
        if x[0].item() != a.world_size:
            print(f"allreduce returned {x[0].item()} on rank {a.rank}, expected {a.world_size}", file=sys.stderr)
            return 1
        dist.barrier()
        start = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(x)
        if use_cuda:
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / a.iters
        if a.rank == 0:
            print(RESULT_PREFIX + json.dumps({"backend": backend, "world_size": a.world_size,
                                              "bytes": x.numel() * 4, "seconds": seconds}), flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0



if __name__ == "__main__":
    sys.exit(main())
