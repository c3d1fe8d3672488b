"""Benchmark of `mpirun_kit doctor` across the simulated cluster: parallel fact
gathering against a one-host-after-another baseline measured in the same run.

The coordinator runs on algo-1 of an N-host simulated cluster (mpirun_kit.sim, needs
root) and reaches the others over real ssh; `--max-parallel 1` is the baseline (what
a serial ssh loop does).  The figure is the ratio of medians; absolute seconds are
printed for context only (the machine may be shared and noisy).  On a machine with
few cores the ratio is bounded by the cores, since each host's gatherer is a Python
process; across real hosts each runs on its own machine.

    python benchmarks/bench_doctor.py                # 4 hosts, 3 repeats
    python benchmarks/bench_doctor.py --hosts 8 --json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    from mpirun_kit.sim import SimCluster

    names = ",".join(f"algo-{i}" for i in range(1, a.hosts + 1))
    times: dict[str, list[float]] = {"serial": [], "parallel": []}
    with tempfile.TemporaryDirectory() as root, SimCluster(a.hosts, root, name="benchdoc") as sim:
        for _ in range(a.repeats):
            for mode, par in (("serial", "1"), ("parallel", str(a.hosts))):
                start = time.perf_counter()
                proc = sim.run("algo-1", [sys.executable, "-m", "mpirun_kit.cli.main", "doctor", "--hosts", names,
                                          "--no-allreduce", "--max-parallel", par, "--json"], timeout=300)
                times[mode].append(time.perf_counter() - start)
                if proc.returncode != 0:
                    print(f"doctor exited {proc.returncode}: {proc.stderr[-1000:]}", file=sys.stderr)
                    return 1
    serial, parallel = statistics.median(times["serial"]), statistics.median(times["parallel"])
    result = {"hosts": a.hosts, "repeats": a.repeats, "serial_s": round(serial, 3),
              "parallel_s": round(parallel, 3), "speedup": round(serial / parallel, 2)}
    if a.json:
        print(json.dumps(result))
    else:
        print(f"doctor gather, {a.hosts} sim hosts, median of {a.repeats}: serial {serial:.2f} s, "
              f"parallel {parallel:.2f} s, speedup {serial / parallel:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
