"""Launch benchmark of the per-host entrypoint on the simulated cluster (needs root).

For N hosts x 2 ranks, median of several runs, read from the job's own timeline
(``<opt_ml>/output/timeline.json``, written by the master: mpirun_kit/observe/timeline.py):

(a) launch: the first entrypoint's process started -> the last rank's program started
    (the timeline's ``launch_s``), next to the floor measured in the same run: a bare
    ``mpirun`` of the same program from algo-1 over sshds already up (same placement and
    interface flags, no wrapper), from its start to the last rank's program started;
    also the part before mpirun is exec'd (the master's ``mpirun_started`` phase);
(a') the same launch, timed from the master's start, with the workers' entrypoints
    already up and idle: on this few-core machine N interpreters starting at once
    compete for the same CPUs, which real hosts do not;
(b) shutdown tail: the last rank exited -> the master exited (the timeline's
    ``shutdown_s``; the master exits only after every worker acknowledged the result);
(c) failure fan-out: one rank on the last worker exits 3 -> the master exited, every
    worker having acknowledged the result (bare mpirun's own abort of the same failure,
    measured in the same run, is its floor).

(d) the account (issue 41): for each phase of the launch (observe/timeline.py ``ACCOUNT_PHASES``: entrypoints
    started, sshd ready, key hand-off, mpirun started, daemons up, wrappers started, keys taken, programs
    started, channel hello) and the programs' first output, the seconds from the first entrypoint's start to
    the last host or rank that reached it, next to the floor's daemons up, programs started and first output
    from its mpirun's start; and the CPU the toolkit's own processes spent per rank (entrypoints without
    mpirun, wrappers without their programs), up to the programs' start and in the whole job.

The floor has no timeline: its program stamps when its own process started (from
/proc/self/stat, the moment the MPI daemon forked it), when its parent (the daemon) started,
and when its first line ran (its first output) into its host's /opt/ml/output/stamps; the
rank wrapper reports the same events.  Every sim host shares this machine's clock.  The
machine is shared and noisy: compare each figure with its floor from the same run.

    python benchmarks/bench_launch.py                      # N = 2, 4, 8; 3 runs each
    python benchmarks/bench_launch.py --hosts 2,4,8,16 --repeats 3
    python benchmarks/bench_launch.py --hosts 2 --repeats 5 --json
    python benchmarks/bench_launch.py --hosts 8 --launch-only   # (a), (b), (d) and the floor only
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
#: the user program: stamp when its process started and when its code ran, work a little,
#: stamp its end; the chosen rank fails instead.
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
def started(pid):
    with open(f"/proc/{pid}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))
stamp("proc", started("self"))
# the floor's daemon (orted; mpirun on its own host) is the program's parent; a rank wrapper's program's
# parent is the wrapper (the wrapper reports its own parent)
stamp("parent", started(os.getppid()))
stamp("start", t)
crash = int(sys.argv[1]) if len(sys.argv) > 1 else -1
if int(rank) == crash:
    time.sleep(1.0)
    stamp("crash", time.time())
    os._exit(3)
time.sleep(0.5 if crash < 0 else 60)
stamp("end", time.time())
"""


def stamps(sim, kind: str) -> list[float]:
    """Every rank's ``kind`` stamp (proc, start, end, crash) on every host."""
    out = []
    for h in sim.hosts:
        for p in (h.opt_ml / "output" / "stamps").glob(f"{kind}.*"):
            out.append(float(p.read_text()))
    return out


def clear(sim) -> None:
    """Remove the stamps and the last job's timeline from every host."""
    for h in sim.hosts:
        d = h.opt_ml / "output" / "stamps"
        if d.exists():
            for p in d.iterdir():
                p.unlink()
        (h.opt_ml / "output" / "timeline.json").unlink(missing_ok=True)


def timeline_of(sim) -> dict:
    """The job's merged timeline, as the master wrote it on algo-1."""
    from mpirun_kit.observe import timeline

    return timeline.load(sim.hosts[0].opt_ml / "output" / "timeline.json")


def phase_t(data: dict, host: str, phase: str) -> float | None:
    return next((r["t"] for r in data["hosts"][host]["phases"] if r["phase"] == phase), None)


def figures(data: dict) -> dict:
    """The benchmark's figures from one job's timeline: launch, start -> mpirun exec, shutdown tail,
    fan-out (the first failing rank's exit -> the master's exit), the master's start-up CPU."""
    from mpirun_kit.observe import timeline

    s = timeline.summary(data)
    master = timeline.master_of(data)
    first = min(phase_t(data, h, "started") for h in data["hosts"] if phase_t(data, h, "started") is not None)
    mpirun = phase_t(data, master, "mpirun_started")
    exited = phase_t(data, master, "exited")
    failed = [r["exited"] for r in data["ranks"] if "exited" in r and (r.get("exit_code") or r.get("signal"))]
    return {"launch": s["launch_s"], "to_mpirun": None if mpirun is None else mpirun - first,
            "tail": s["shutdown_s"], "fanout": None if not failed or exited is None else exited - min(failed),
            "master_cpu": s["startup_cpu_s"].get(master)}


#: the account's phases (observe/timeline.py ACCOUNT_PHASES) and the programs' first output, which the
#: benchmark's program stamps; the floor has three of them.
ACCOUNT = ("entrypoints started", "sshd ready", "key hand-off", "mpirun started", "daemons up", "wrappers started",
           "keys taken", "programs started", "channel hello", "first output")
#: the shutdown tail (b) in two: the last rank's exit -> mpirun's exit (mpirun's and its daemons' teardown, and
#: the wrappers' own exit), then mpirun's exit -> the master's exit (the result out, every worker's ack).
TAIL = ("tail: to mpirun's exit", "tail: mpirun's exit to the master's")
FLOOR_ACCOUNT = ("daemons up", "programs started", "first output", "tail: to mpirun's exit")


def account(sim, data: dict) -> dict:
    """One job's account: each phase's seconds from the first entrypoint's start (None where unknown), and
    the toolkit's CPU per rank up to the programs' start and in the whole job."""
    from mpirun_kit.observe import timeline

    acc = timeline.launch_account(data) if hasattr(timeline, "launch_account") else older_account(data)
    path = timeline.critical_path(data)
    firsts = stamps(sim, "start")
    master = timeline.master_of(data)
    last_exit = max((r["exited"] for r in data["ranks"] if "exited" in r), default=None)
    mpirun_exit, exited = phase_t(data, master, "mpirun_exited"), phase_t(data, master, "exited")
    phases = {**acc["phases"], "first output": max(firsts) - path[0].t if firsts and path else None,
              TAIL[0]: None if last_exit is None or mpirun_exit is None else mpirun_exit - last_exit,
              TAIL[1]: None if mpirun_exit is None or exited is None else exited - mpirun_exit}
    return {"phases": phases, "cpu_launch": acc["cpu"]["per_rank_launch_s"], "cpu_job": acc["cpu"]["per_rank_job_s"]}


def older_account(data: dict) -> dict:
    """The account of a tree before it had one (this file copied into an older checkout, for docs/benchmarks.md's
    before and after): what its timeline holds (the entrypoints' phases, each rank's program start; daemons up
    from its workers' scan, every 0.2 s), the rest None; CPU: the entrypoints' to mpirun's or their daemon's start."""
    hosts = data["hosts"]
    master = next(h for h, v in hosts.items() if v["role"] == "master")
    t0 = min(r["t"] for v in hosts.values() for r in v["phases"] if r["phase"] == "started")

    def last(ts):
        ts = [t for t in ts if t is not None]
        return max(ts) - t0 if ts else None

    phases = dict.fromkeys(ACCOUNT[:-1])
    phases.update({"entrypoints started": last(phase_t(data, h, "started") for h in hosts),
                   "sshd ready": last([phase_t(data, master, "ready")]),
                   "mpirun started": last([phase_t(data, master, "mpirun_started")]),
                   "daemons up": last(phase_t(data, h, "daemon_up") for h in hosts if h != master),
                   "programs started": last(r.get("started") for r in data["ranks"])})
    cpu = [next((r["cpu_s"] for r in v["phases"] if r["phase"] in ("mpirun_started", "daemon_up")), 0.0)
           for v in hosts.values()]
    return {"phases": phases, "cpu": {"per_rank_launch_s": None, "per_rank_job_s": None,
                                      "entrypoints_launch_per_rank_s": sum(cpu) / max(1, len(data["ranks"]))}}


def floor_account(sim, t0: float, t_end: float) -> dict:
    """The floor's phases, from its mpirun's start ``t0``: the last daemon up, program started, first output; and
    its tail, the last program's end -> its mpirun's exit seen here at ``t_end``."""
    return {"daemons up": max(stamps(sim, "parent")) - t0, "programs started": max(stamps(sim, "proc")) - t0,
            "first output": max(stamps(sim, "start")) - t0, TAIL[0]: t_end - max(stamps(sim, "end"))}


def stamps_launch(sim, t0: float) -> float:
    """The launch by the programs' own stamps: ``t0`` -> the last rank's program process started."""
    return max(stamps(sim, "proc")) - t0


def wait_exits(procs: dict, timeout: float) -> dict[str, tuple[float, int]]:
    """Wait for every process; (time seen exited, exit code) per host, polled at 5 ms."""
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


def entry_argv() -> list[str]:
    return [str(Path(sys.executable).parent / "mpirun_kit"), "entrypoint", "--no-sshd"]


def run_job(sim, crash: int = -1, hosts=None, timeouts=None) -> tuple[float, dict]:
    """Start the STAMP job on every host (or ``hosts``); return (time just before, the processes)."""
    from mpirun_kit.spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER, LaunchSpec

    extra = {"timeouts": timeouts} if timeouts is not None else {}
    spec = LaunchSpec(program=(sys.executable, "-c", STAMP, str(crash)), processes_per_host=PPH, **extra)
    sim.write_sagemaker_config({LAUNCH_SPEC_HYPERPARAMETER: spec.to_json()})
    clear(sim)
    t0 = time.time()
    return t0, sim.start_entrypoints(entry_argv(), hosts=hosts)


def one_n(n: int, repeats: int, root: Path, launch_only: bool = False, name: str = "benchl") -> dict:
    """Every figure at ``n`` hosts, median of ``repeats``; ``launch_only``: the floor, (a), (b) and (d) only."""
    from mpirun_kit.sim import SimCluster

    py = sys.executable
    ranks = n * PPH
    hosts = ",".join(f"algo-{i}:{PPH}" for i in range(1, n + 1))

    def floor_argv(crash: int) -> list[str]:
        return ["mpirun", "--allow-run-as-root", "-np", str(ranks), "-H", hosts, "--bind-to", "none",
                "--map-by", "slot", "--oversubscribe", "--mca", "plm_rsh_no_tree_spawn", "1",
                "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
                "--mca", "mpi_yield_when_idle", "1", py, "-c", STAMP, str(crash)]

    keys = ("floor", "launch", "to_mpirun", "master_last", "master_cpu", "tail", "floor_abort", "fanout")
    res: dict[str, list[float]] = {k: [] for k in keys}
    ours: dict[str, list[float]] = {k: [] for k in (*ACCOUNT, *TAIL, "cpu_launch", "cpu_job")}
    floors: dict[str, list[float]] = {k: [] for k in FLOOR_ACCOUNT}
    with SimCluster(n, root / f"n{n}", name=f"{name}{n}") as sim:
        for _ in range(repeats):
            # floor: bare mpirun from algo-1, sshds already up
            clear(sim)
            t0 = time.time()
            r = sim.run("algo-1", floor_argv(-1), timeout=300)
            t_end = time.time()
            if r.returncode != 0:
                raise RuntimeError(f"bare mpirun failed: {r.stderr[-800:]}")
            res["floor"].append(stamps_launch(sim, t0))
            for k, v in floor_account(sim, t0, t_end).items():
                floors[k].append(v)
            # (a) + (b) + (d)
            _, procs = run_job(sim)
            exits = wait_exits(procs, 300)
            bad = {h: c for h, (_, c) in exits.items() if c != 0}
            if bad:
                raise RuntimeError(f"launch run failed on {bad}; see {sim.hosts[0].dir}/entrypoint.log")
            data = timeline_of(sim)
            f = figures(data)
            for k in ("launch", "to_mpirun", "tail", "master_cpu"):
                res[k].append(f[k])
            acc = account(sim, data)
            for k, v in (*acc["phases"].items(), ("cpu_launch", acc["cpu_launch"]), ("cpu_job", acc["cpu_job"])):
                if v is not None:
                    ours[k].append(v)
            if launch_only:
                continue
            # (a') the same launch with the workers' entrypoints already up and idle when the master's
            # starts: what a real cluster sees, where no host's start-up competes for another's CPUs.
            _, workers = run_job(sim, hosts=[h.name for h in sim.hosts[1:]])
            end = time.monotonic() + 120
            while not all("plan ready" in p.output() for p in workers.values()):
                if time.monotonic() > end:
                    raise RuntimeError("worker entrypoints did not get ready within 120 s")
                time.sleep(0.05)
            time.sleep(0.5)
            procs = {**workers, **sim.start_entrypoints(entry_argv(), hosts=["algo-1"])}
            exits = wait_exits(procs, 300)
            if any(c != 0 for _, c in exits.values()):
                raise RuntimeError(f"master-last run failed: {exits}")
            data = timeline_of(sim)
            last = max(r["started"] for r in data["ranks"])
            res["master_last"].append(last - phase_t(data, "algo-1", "started"))
            # (c) and its floor: bare mpirun's own abort of the same failure
            clear(sim)
            r = sim.run("algo-1", floor_argv(ranks - 1), timeout=300)
            if r.returncode == 0:
                raise RuntimeError("bare mpirun with a failing rank exited 0")
            res["floor_abort"].append(time.time() - min(stamps(sim, "crash")))
            _, procs = run_job(sim, crash=ranks - 1)
            exits = wait_exits(procs, 300)
            if any(c == 0 for _, c in exits.values()):
                raise RuntimeError(f"fan-out run: some entrypoint exited 0: {exits}")
            res["fanout"].append(figures(timeline_of(sim))["fanout"])
    med = {k: round(statistics.median(v), 3) if v else float("nan") for k, v in res.items()}

    def medians(d):
        return {k: round(statistics.median(v), 3) if v else None for k, v in d.items()}

    return {"hosts": n, "ranks": ranks, "repeats": repeats, **{f"{k}_s": v for k, v in med.items()},
            "launch_over_floor_s": round(med["launch"] - med["floor"], 3),
            "fanout_over_floor_s": round(med["fanout"] - med["floor_abort"], 3),
            "account": {"ours": medians(ours), "floor": medians(floors)},
            "runs": {k: [round(x, 3) for x in v] for k, v in {**res, **ours}.items()}}


def table(rows: list[dict]) -> str:
    lines = ["| hosts x ranks | bare mpirun floor | (a) launch | launch - floor | of which: start -> mpirun exec "
             "| master CPU to mpirun | (a') launch, master last | (b) shutdown tail | bare mpirun abort "
             "| (c) failure fan-out |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['hosts']} x {PPH} | {r['floor_s']:.2f} s | {r['launch_s']:.2f} s | "
                     f"{r['launch_over_floor_s']:+.2f} s | {r['to_mpirun_s']:.2f} s | {r['master_cpu_s']:.2f} s | "
                     f"{r['master_last_s']:.2f} s | {r['tail_s']:.2f} s | {r['floor_abort_s']:.2f} s | "
                     f"{r['fanout_s']:.2f} s ({r['fanout_over_floor_s']:+.2f}) |")
    return "\n".join(lines)


def account_table(rows: list[dict]) -> str:
    """The account (d): a row per phase, a column per host count; each cell ours, then the floor's in brackets
    where the floor has that phase (its seconds from its own mpirun's start)."""
    def s(v):
        return "-" if v is None else f"{v:.2f}"

    lines = ["| phase (s from the first start to the last) | " + " | ".join(f"{r['hosts']} x {PPH}" for r in rows)
             + " |", "|---|" + "---|" * len(rows)]
    for k in (*ACCOUNT, *TAIL):
        cells = []
        for r in rows:
            ours, floor = r["account"]["ours"].get(k), r["account"]["floor"].get(k)
            cells.append(s(ours) + (f" ({s(floor)})" if k in FLOOR_ACCOUNT else ""))
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    for k, what in (("cpu_launch", "toolkit CPU per rank to the programs' start"),
                    ("cpu_job", "toolkit CPU per rank, whole job")):
        lines.append(f"| {what} | " + " | ".join(
            "-" if r["account"]["ours"].get(k) is None else f"{r['account']['ours'][k] * 1000:.0f} ms"
            for r in rows) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", default="2,4,8", help="comma-separated host counts, e.g. 2,4,8,16 (default 2,4,8)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true", help="print one JSON object per host count")
    p.add_argument("--launch-only", action="store_true",
                   help="the floor, (a) launch, (b) tail and (d) the account only: no master-last run, no fan-out")
    a = p.parse_args()
    try:
        counts = [int(x) for x in a.hosts.split(",")]
    except ValueError:
        p.error(f"--hosts {a.hosts!r}: expected comma-separated host counts such as 2,4,8,16")
    if any(n < 2 for n in counts):
        p.error(f"--hosts {a.hosts!r}: every host count must be at least 2 (a master and a worker)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_launch.") as root:
        for n in counts:
            rows.append(one_n(n, a.repeats, Path(root), launch_only=a.launch_only))
            if a.json:
                print(json.dumps(rows[-1]), flush=True)
            else:
                print(f"N={n} done: {json.dumps({k: v for k, v in rows[-1].items() if k != 'runs'})}",
                      file=sys.stderr, flush=True)
    if not a.json:
        print(f"median of {a.repeats} runs, {PPH} ranks per host, simulated cluster on this machine")
        print(table(rows))
        print()
        print("the account (d): ours, and bare mpirun's in brackets from its own start")
        print(account_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
