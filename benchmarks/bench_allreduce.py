"""All-reduce bus bandwidth across simulated hosts, through the job layer end to end.

Runs jobs/allreduce-bench.yaml with `mpirun_kit submit --target sim` (needs root:
the simulated cluster uses network namespaces) twice in the same run: with
torch.distributed's gloo backend (what the training module uses on CPU) and with
plain MPI all-reduce (mpi4py) as the baseline.  The figure is the ratio gloo/MPI
bus bandwidth per message size; absolute GB/s are printed for context only (the
hosts share this machine's cores and a veth "network", so they say nothing about
EFA).  On real hosts run the same job with --target ssh or sagemaker.

    python benchmarks/bench_allreduce.py                 # 3 hosts x 2 ranks
    python benchmarks/bench_allreduce.py --hosts 2 --json
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINE = re.compile(r"allreduce backend=(\w+) world=(\d+) hosts=(\d+) bytes=(\d+) .*busbw_GBps=([0-9.]+)")


def run(backend: str, hosts: int, sizes: str, iters: int, tmp: Path) -> dict[int, float]:
    text = (REPO / "jobs" / "allreduce-bench.yaml").read_text()
    text = re.sub(r"args: \[.*\]", f'args: [--backend, {backend}, --sizes, "{sizes}", --iters, "{iters}"]', text)
    text = text.replace("  hosts: 3\n", f"  hosts: {hosts}\n")
    # All simulated hosts share this machine's few cores: without yielding, Open MPI's busy-polling
    # progress loop starves the other ranks and the MPI baseline measures the scheduler, not MPI.
    text += "mpi:\n  mca: {mpi_yield_when_idle: 1}\n"
    spec = tmp / f"allreduce-{backend}.yaml"
    spec.write_text(text)
    res = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "submit", str(spec), "--target", "sim"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise SystemExit(f"bench_allreduce: the {backend} job failed (exit {res.returncode}):\n{res.stderr[-2000:]}")
    return {int(m.group(4)): float(m.group(5)) for m in LINE.finditer(res.stdout)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=3)
    p.add_argument("--sizes", default="64K,1M,8M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mpi = run("mpi", args.hosts, args.sizes, args.iters, Path(tmp))
        gloo = run("gloo", args.hosts, args.sizes, args.iters, Path(tmp))
    rows = [{"bytes": b, "mpi_busbw_GBps": mpi[b], "gloo_busbw_GBps": gloo.get(b),
             "gloo_over_mpi": round(gloo[b] / mpi[b], 3) if gloo.get(b) and mpi[b] else None} for b in sorted(mpi)]
    if args.json:
        print(json.dumps({"hosts": args.hosts, "ranks_per_host": 2, "rows": rows}, indent=2))
        return 0
    print(f"all-reduce across {args.hosts} simulated hosts x 2 ranks (busbw, GB/s; ratio = gloo / MPI)")
    print("| bytes | MPI (baseline) | gloo | gloo / MPI |")
    print("|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['bytes']} | {r['mpi_busbw_GBps']:.3f} | {r['gloo_busbw_GBps']:.3f} | {r['gloo_over_mpi']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
