"""A failing rank against torchrun (issue #40): how long a 2-rank job takes to end when one rank exits 3 while the
other waits for it, at the defaults.

Both jobs run on this machine, 2 ranks each, the same shape of program: every rank joins a first collective,
then rank 1 writes the time and calls ``sys.exit(3)`` while rank 0 waits in a second one.

* mpirun_kit: ``mpirun_kit launch --hosts localhost:2 -- python PROG`` (mpi4py, a Barrier); the rank's exit
  goes through pyhook/sitecustomize.py's fail-fast abort;
* torchrun: ``python -m torch.distributed.run --nproc_per_node 2 PROG`` (torch.distributed, gloo, a barrier).

Figures per tool, ``--rounds`` times, alternating (A B A B): the job's exit code; from the failing rank's
``sys.exit`` to the launcher's exit (the time a failure holds the job), and the launcher's whole wall time.

    python benchmarks/bench_fail_fast.py [--rounds 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MPI_PROG = """\
import sys, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
if comm.rank == 1:
    open(sys.argv[1], "w").write(repr(time.time()))
    sys.exit(3)
comm.Barrier()
"""

TORCH_PROG = """\
import os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    open(sys.argv[1], "w").write(repr(time.time()))
    sys.exit(3)
dist.barrier()
"""


def run(argv: list[str], mark: Path, timeout: float) -> dict:
    mark.unlink(missing_ok=True)
    t0 = time.time()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    end = time.time()
    failed_at = float(mark.read_text()) if mark.exists() else None
    return {"exit_code": p.returncode, "wall_s": round(end - t0, 3),
            "failure_to_end_s": round(end - failed_at, 3) if failed_at else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="bench-fail-fast-"))
    (d / "mpi_prog.py").write_text(MPI_PROG)
    (d / "torch_prog.py").write_text(TORCH_PROG)
    mark = d / "failed_at"
    py = sys.executable
    tools = {
        "mpirun_kit": [py, "-m", "mpirun_kit.cli.main", "-q", "launch", "--hosts", "localhost:2", "--opt-ml",
                       str(d / "opt_ml"), "--", py, str(d / "mpi_prog.py"), str(mark)],
        "torchrun": [py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                     str(d / "torch_prog.py"), str(mark)],
    }
    rows: dict[str, list[dict]] = {k: [] for k in tools}
    for _ in range(a.rounds):
        for name, argv in tools.items():
            rows[name].append(run(argv, mark, a.timeout))
    summary = {name: {"exit_codes": sorted({r["exit_code"] for r in rs}),
                      "failure_to_end_s_median": statistics.median(r["failure_to_end_s"] for r in rs
                                                                   if r["failure_to_end_s"] is not None),
                      "wall_s_median": statistics.median(r["wall_s"] for r in rs), "runs": rs}
               for name, rs in rows.items()}
    summary["load_average"] = os.getloadavg()[0]
    if a.json:
        print(json.dumps(summary, indent=2))
    else:
        for name in tools:
            s = summary[name]
            print(f"{name:<11} exit {s['exit_codes']}  failure -> end {s['failure_to_end_s_median']:.2f} s  "
                  f"wall {s['wall_s_median']:.2f} s (median of {a.rounds})")
        print(f"load average {summary['load_average']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
