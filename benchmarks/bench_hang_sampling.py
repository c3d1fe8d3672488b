"""What watching a rank from outside costs (issue 29): CPU per rank and the effect on a training step's time.

The rank wrapper's relay (observe/relay.py ``Relay`` with its ``Sampler``) watches a real program here as
it does under mpirun: the program is this script run with ``--program`` (the wrapper's child), a loop of
CPU-bound "steps" that never prints, never reports progress and does no I/O: the worst case, since such
a program is quiet all the time and sampled at the full rate (py-spy ``dump --native --locals``; a
program that reports progress or writes output is not sampled at all while it does).

Two phases, one after the other in the same run, each ``--seconds`` long, then again (A B A B, so a
drift of the machine's load hits both alike):

* baseline: the relay without a sampler (what a wrapper did before issue 29);
* sampled: the relay with a ``Sampler`` for ``--stall-s`` (default 10 s: a read every 2 s or, when
  a read costs more, 100 x its CPU cost, the 1 % bound; at the default ``timeouts.stall_s`` of
  600 s reads are 120 s apart).

Figures per phase:

* sampling CPU: the CPU time of the readers (py-spy and its kind, the wrapper's children) plus the
  relay's own (this process's CPU, the baseline's subtracted), over wall time: % of one core per rank;
* step time: the program's steps (each a fixed amount of work), mean and p99, and their ratio to the
  baseline's; a read pauses the program for as long as it takes, so the steps it lands in are longer.
* reads taken, and the CPU one read costs; from it the share at the default stall_s.

    python benchmarks/bench_hang_sampling.py                 # 2 x (20 s baseline + 20 s sampled)
    python benchmarks/bench_hang_sampling.py --seconds 10 --json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpirun_kit.observe import relay  # noqa: E402

DEFAULT_STALL_S = 600.0


def program(out: Path, seconds: float) -> None:
    """The watched program: steps of fixed work inside a function (its locals change per step, as a training
    loop's do), durations kept in memory and written once at the end (no I/O while it runs)."""
    def work(n: int) -> int:
        acc = 0
        for i in range(n):
            acc = (acc * 31 + i) % 1_000_003
        return acc

    def train() -> list[float]:
        times, end = [], time.monotonic() + seconds
        step = 0
        while time.monotonic() < end:
            t0 = time.perf_counter()
            work(200_000)
            times.append(time.perf_counter() - t0)
            step += 1
        return times

    out.write_text(json.dumps(train()))


def phase(sampled: bool, seconds: float, stall_s: float, tmp: Path) -> dict:
    out = tmp / f"steps-{time.monotonic_ns()}.json"
    r, w = os.pipe()
    os.set_blocking(r, False)
    cpu0, wall0 = os.times(), time.monotonic()
    child = subprocess.Popen([sys.executable, __file__, "--program", str(out), "--seconds", str(seconds)],
                             pass_fds=(w,))
    os.close(w)
    watcher = relay.Relay(None, {"rank": 0, "host": "localhost"}, r)
    if sampled:
        watcher.sampler = relay.Sampler(stall_s, time.monotonic())
    watcher.start(child.pid)
    time.sleep(seconds)
    # Before the program is reaped: the children's CPU is the readers' alone (each was waited for).
    cpu1, wall1 = os.times(), time.monotonic()
    reads = watcher.sampler.samples if sampled else 0
    cost = watcher.sampler.cost_s if sampled else 0.0
    interval = watcher.sampler.interval() if sampled else None
    child.wait()
    watcher.stop()
    steps = json.loads(out.read_text())
    steps.sort()
    wall = wall1 - wall0
    return {"sampled": sampled, "wall_s": wall,
            "readers_cpu_pct": 100 * ((cpu1.children_user + cpu1.children_system)
                                      - (cpu0.children_user + cpu0.children_system)) / wall,
            "relay_cpu_pct": 100 * ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / wall,
            "reads": reads, "last_read_cpu_s": cost, "interval_s": interval,
            "steps": len(steps), "step_mean_ms": 1000 * statistics.fmean(steps),
            "step_p99_ms": 1000 * steps[min(len(steps) - 1, int(0.99 * len(steps)))]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each phase (default 20)")
    ap.add_argument("--stall-s", type=float, default=10.0, help="timeouts.stall_s while sampled (default 10)")
    ap.add_argument("--rounds", type=int, default=2, help="baseline + sampled pairs (default 2)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    ap.add_argument("--program", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.program:
        program(Path(args.program), args.seconds)
        return 0
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-hang-") as tmp:
        phases = [phase(sampled, args.seconds, args.stall_s, Path(tmp))
                  for _ in range(args.rounds) for sampled in (False, True)]
    base = [p for p in phases if not p["sampled"]]
    samp = [p for p in phases if p["sampled"]]

    def mean(ps, k):
        return statistics.fmean(p[k] for p in ps)

    reads = sum(p["reads"] for p in samp)
    read_cpu = sum(p["readers_cpu_pct"] * p["wall_s"] / 100 for p in samp) / max(reads, 1)
    result = {
        "load": os.getloadavg()[0], "seconds": args.seconds, "stall_s": args.stall_s, "rounds": args.rounds,
        "phases": phases,
        "sampling_cpu_pct_per_rank": mean(samp, "readers_cpu_pct") + mean(samp, "relay_cpu_pct")
        - mean(base, "relay_cpu_pct"),
        "cpu_per_read_s": read_cpu,
        "default_stall_s_cpu_pct": 100 * read_cpu / relay.Sampler(DEFAULT_STALL_S, 0.0).interval(),
        "step_mean_ratio": mean(samp, "step_mean_ms") / mean(base, "step_mean_ms"),
        "step_p99_ratio": mean(samp, "step_p99_ms") / mean(base, "step_p99_ms"),
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"load {result['load']:.2f}; {args.rounds} x ({args.seconds:g} s baseline + {args.seconds:g} s sampled at "
          f"stall_s {args.stall_s:g} s)")
    for p in phases:
        print(f"  {'sampled ' if p['sampled'] else 'baseline'}: readers {p['readers_cpu_pct']:.2f} % + relay "
              f"{p['relay_cpu_pct']:.2f} % of a core, {p['reads']} reads (interval {p['interval_s'] or 0:.1f} s), "
              f"{p['steps']} steps, mean {p['step_mean_ms']:.1f} ms, p99 {p['step_p99_ms']:.1f} ms")
    print(f"sampling cost per rank at stall_s {args.stall_s:g} s: {result['sampling_cpu_pct_per_rank']:.2f} % of a "
          f"core ({read_cpu * 1000:.0f} ms CPU per read); at the default stall_s {DEFAULT_STALL_S:g} s: "
          f"{result['default_stall_s_cpu_pct']:.3f} %")
    print(f"step time sampled / baseline: mean x{result['step_mean_ratio']:.3f}, p99 x{result['step_p99_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
