"""Launch benchmark of the per-host entrypoint on the simulated cluster (needs root).

For N hosts x 2 ranks, median of several runs, three figures:

(a) launch: every entrypoint started -> every rank running user code, next to the
    floor measured in the same run: a bare ``mpirun`` of the same program from
    algo-1 over sshds already up (same placement and interface flags, no wrapper);
    also the part before mpirun is exec'd (from the master's "mpirun starting" log line);
(a') the same launch, timed from the master's start, with the workers' entrypoints
    already up and idle: on this few-core machine N interpreters starting at once
    compete for the same CPUs, which real hosts do not;
(b) shutdown tail: the last rank's user code finished -> every entrypoint exited;
(c) failure fan-out: one rank on the last worker exits 3 -> every entrypoint exited
    non-zero.

Ranks stamp ``time.time()`` into their host's /opt/ml/output/stamps (every sim host
shares the machine's clock); entrypoint exits are seen by polling at 5 ms.  The
machine is shared and noisy: compare (a) with its floor from the same run.

    python benchmarks/bench_launch.py                      # N = 2, 4, 8; 3 runs each
    python benchmarks/bench_launch.py --hosts 2 --repeats 5 --json
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

PPH = 2
#: the user program: stamp start, work a little, stamp end; the chosen rank fails instead.
STAMP = r"""
import os, sys, time
t = time.time()
rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
d = "/opt/ml/output/stamps"
os.makedirs(d, exist_ok=True)
def stamp(kind, value):
    tmp = f"{d}/.{kind}.{rank}"
    with open(tmp, "w") as f:
        f.write(repr(value))
    os.replace(tmp, f"{d}/{kind}.{rank}")
stamp("start", t)
crash = int(sys.argv[1]) if len(sys.argv) > 1 else -1
if int(rank) == crash:
    time.sleep(1.0)
    stamp("crash", time.time())
    os._exit(3)
time.sleep(0.5 if crash < 0 else 60)
stamp("end", time.time())
"""


def _stamps(sim, kind: str) -> list[float]:
    out = []
    for h in sim.hosts:
        for p in (h.opt_ml / "output" / "stamps").glob(f"{kind}.*"):
            out.append(float(p.read_text()))
    return out


def _clear(sim) -> None:
    for h in sim.hosts:
        d = h.opt_ml / "output" / "stamps"
        if d.exists():
            for p in d.iterdir():
                p.unlink()


def _mpirun_exec_time(log_text: str) -> float | None:
    """Wall time of the master's "mpirun starting" log line (logging's local-time stamp, ms)."""
    for line in log_text.splitlines():
        if "mpirun starting" in line:
            stamp, ms = line[:23].split(",")
            return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000
    return None


def _wait_exits(procs: dict, timeout: float) -> dict[str, tuple[float, int]]:
    done: dict[str, tuple[float, int]] = {}
    end = time.monotonic() + timeout
    while len(done) < len(procs):
        for h, p in procs.items():
            if h not in done and p.poll() is not None:
                done[h] = (time.time(), p.returncode)
        if time.monotonic() > end:
            raise RuntimeError(f"entrypoints still running after {timeout} s: {sorted(set(procs) - set(done))}")
        time.sleep(0.005)
    return done


def one_n(n: int, repeats: int, root: Path) -> dict:
    from mpirun_kit.spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER, LaunchSpec
    from mpirun_kit.sim import SimCluster

    py = sys.executable
    entry = [str(Path(py).parent / "mpirun_kit"), "entrypoint", "--no-sshd"]
    ranks = n * PPH
    hosts = ",".join(f"algo-{i}:{PPH}" for i in range(1, n + 1))
    floor_argv = ["mpirun", "--allow-run-as-root", "-np", str(ranks), "-H", hosts, "--bind-to", "none",
                  "--map-by", "slot", "--oversubscribe", "--mca", "plm_rsh_no_tree_spawn", "1",
                  "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
                  "--mca", "mpi_yield_when_idle", "1", py, "-c", STAMP]
    res = {"floor": [], "launch": [], "to_mpirun": [], "master_last": [], "tail": [], "fanout": []}
    with SimCluster(n, root / f"n{n}", name=f"benchl{n}") as sim:
        def job(crash: int) -> tuple[float, dict, str]:
            spec = LaunchSpec(program=(py, "-c", STAMP, str(crash)), processes_per_host=PPH)
            sim.write_sagemaker_config({LAUNCH_SPEC_HYPERPARAMETER: spec.to_json()})
            _clear(sim)
            t0 = time.time()
            procs = sim.start_entrypoints(entry)
            return t0, _wait_exits(procs, 300), procs["algo-1"].output()

        for _ in range(repeats):
            # floor: bare mpirun from algo-1, sshds already up
            _clear(sim)
            t0 = time.time()
            r = sim.run("algo-1", floor_argv, timeout=300)
            if r.returncode != 0:
                raise RuntimeError(f"bare mpirun failed: {r.stderr[-800:]}")
            res["floor"].append(max(_stamps(sim, "start")) - t0)
            # (a) + (b)
            t0, exits, master_log = job(-1)
            bad = {h: c for h, (_, c) in exits.items() if c != 0}
            if bad:
                raise RuntimeError(f"launch run failed on {bad}; see {sim.hosts[0].dir}/entrypoint.log")
            starts = _stamps(sim, "start")
            if len(starts) != ranks:
                raise RuntimeError(f"{len(starts)} of {ranks} ranks stamped their start")
            res["launch"].append(max(starts) - t0)
            exec_at = _mpirun_exec_time(master_log)
            if exec_at is not None:
                res["to_mpirun"].append(exec_at - t0)
            res["tail"].append(max(t for t, _ in exits.values()) - max(_stamps(sim, "end")))
            # (a') the same launch with the workers' entrypoints already up and idle when the master's
            # starts: what a real cluster sees, where no host's start-up competes for another's CPUs.
            spec = LaunchSpec(program=(py, "-c", STAMP, "-1"), processes_per_host=PPH)
            sim.write_sagemaker_config({LAUNCH_SPEC_HYPERPARAMETER: spec.to_json()})
            _clear(sim)
            workers = sim.start_entrypoints(entry, hosts=[h.name for h in sim.hosts[1:]])
            end = time.monotonic() + 120
            while not all("plan ready" in p.output() for p in workers.values()):
                if time.monotonic() > end:
                    raise RuntimeError("worker entrypoints did not get ready within 120 s")
                time.sleep(0.05)
            time.sleep(0.5)
            t0 = time.time()
            procs = {**workers, **sim.start_entrypoints(entry, hosts=["algo-1"])}
            exits = _wait_exits(procs, 300)
            if any(c != 0 for _, c in exits.values()):
                raise RuntimeError(f"master-last run failed: {exits}")
            res["master_last"].append(max(_stamps(sim, "start")) - t0)
            # (c)
            _, exits, _ = job(ranks - 1)
            if any(c == 0 for _, c in exits.values()):
                raise RuntimeError(f"fan-out run: some entrypoint exited 0: {exits}")
            res["fanout"].append(max(t for t, _ in exits.values()) - min(_stamps(sim, "crash")))
    med = {k: round(statistics.median(v), 3) if v else float("nan") for k, v in res.items()}
    return {"hosts": n, "ranks": ranks, "repeats": repeats, **{f"{k}_s": v for k, v in med.items()},
            "launch_over_floor_s": round(med["launch"] - med["floor"], 3),
            "runs": {k: [round(x, 3) for x in v] for k, v in res.items()}}


def table(rows: list[dict]) -> str:
    lines = ["| hosts x ranks | bare mpirun floor (s) | (a) launch (s) | launch - floor (s) | of which: start -> "
             "mpirun exec (s) | (a') launch, master last (s) | (b) shutdown tail (s) | (c) failure fan-out (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['hosts']} x {PPH} | {r['floor_s']:.2f} | {r['launch_s']:.2f} | "
                     f"{r['launch_over_floor_s']:+.2f} | {r['to_mpirun_s']:.2f} | {r['master_last_s']:.2f} | "
                     f"{r['tail_s']:.2f} | {r['fanout_s']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", default="2,4,8", help="comma-separated host counts (default 2,4,8)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true", help="print one JSON object per host count")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_launch.") as root:
        for n in (int(x) for x in a.hosts.split(",")):
            rows.append(one_n(n, a.repeats, Path(root)))
            if a.json:
                print(json.dumps(rows[-1]), flush=True)
            else:
                print(f"N={n} done: {json.dumps({k: v for k, v in rows[-1].items() if k != 'runs'})}",
                      file=sys.stderr, flush=True)
    if not a.json:
        print(f"median of {a.repeats} runs, {PPH} ranks per host, simulated cluster on this machine")
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
