"""One rank of the doctor's allreduce smoke test, run as ``python -m mpirun_kit.doctor.allreduce``.

Place in the data flow: coordinate.py starts one of these per rank on every host
(``worker_argv`` builds the argv), rank 0 prints one JSON line with its timing,
and checks.check_allreduce turns it into the ``allreduce`` row.

The backend is NCCL when this rank sees a GPU, else gloo (so the same test runs on
the CPU machines and in the simulated cluster).  Every wait is bounded by
``--timeout``: torch.distributed's own timeout covers the rendezvous and each
collective, so a rank whose peer never comes exits instead of hanging.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta

#: marker in front of rank 0's JSON line, so stray library output is never parsed.
RESULT_PREFIX = "MPIRUN_KIT_ALLREDUCE "


def worker_argv(python: str, *, rank: int, world_size: int, local_rank: int, master: str, port: int,
                nbytes: int, iters: int, timeout_s: float) -> list[str]:
    """argv for one rank (pure; the coordinator runs it locally or over ssh)."""
    return [python, "-m", "mpirun_kit.doctor.allreduce", "--rank", str(rank), "--world-size", str(world_size),
            "--local-rank", str(local_rank), "--master", master, "--port", str(port), "--bytes", str(nbytes),
            "--iters", str(iters), "--timeout", f"{timeout_s:g}"]


def parse_result(output: str) -> dict | None:
    """Rank 0's result from its output, or None when it printed none."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_PREFIX):
            try:
                return json.loads(line[len(RESULT_PREFIX):])
            except json.JSONDecodeError:
                return None
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mpirun_kit.doctor.allreduce",
                                description="One rank of `mpirun_kit doctor`'s allreduce smoke test.")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--local-rank", type=int, default=0)
    p.add_argument("--master", required=True, help="rank 0's host name or address")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bytes", type=int, default=8 << 20)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--timeout", type=float, default=60.0)
    a = p.parse_args(argv)

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
