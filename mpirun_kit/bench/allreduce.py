"""All-reduce bus bandwidth across the job's ranks (what jobs/allreduce-bench.yaml runs).

Place in the data flow: a user program like any other; mpirun starts it on every
rank through the rank wrapper.  Rank and world come from the MPI environment
(mpi4py).  With ``--backend mpi`` it all-reduces numpy buffers with MPI itself;
with ``gloo``/``nccl`` (``auto``: nccl when CUDA is there, else gloo) it
rendezvouses torch.distributed through MPI (rank 0 broadcasts its address and a
free port), which is how the training module communicates.

Bus bandwidth follows nccl-tests: algbw = bytes / time, busbw = algbw * 2(n-1)/n,
the figure comparable across world sizes.  Every rank checks the reduced values
(the sum of 1..world), so a wrong result fails the job (exit 3).  Rank 0 prints::

    allreduce backend=gloo world=6 hosts=3 bytes=1048576 iters=20 time_ms=1.234 algbw_GBps=0.85 busbw_GBps=1.41
    allreduce check ok world=6 expected=21.0
"""
from __future__ import annotations

import argparse
import socket
import sys
import time

CHECK_FAILED = 3


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m mpirun_kit.bench.allreduce", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("auto", "mpi", "gloo", "nccl"), default="auto")
    p.add_argument("--sizes", default="1M", help="comma-separated message sizes in bytes (K/M/G suffixes), e.g. 64K,1M,16M")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations per size")
    return p.parse_args(argv)


def parse_size(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    try:
        return int(float(t[:-1]) * mult[t[-1]]) if t and t[-1] in mult else int(t)
    except ValueError:
        raise SystemExit(f"allreduce: size {text!r} is not a size; expected bytes like 65536, 64K or 1M") from None


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s, nccl-tests' definitions."""
    alg = nbytes / seconds / 1e9 if seconds > 0 else float("inf")
    return alg, alg * (2 * (world - 1) / world if world > 1 else 1.0)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
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
        local = int(__import__("os").environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
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


if __name__ == "__main__":
    sys.exit(main())
