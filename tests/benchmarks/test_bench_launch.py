"""benchmarks/bench_launch.py reads its figures from the job's timeline: on the simulated cluster (real sshd,
real mpirun, 3 hosts x 2 ranks) the timeline's launch figure agrees with the programs' own stamps.

Two measurements of the same run, compared with each other (not with a time limit): the timeline's
launch (the first entrypoint's process start -> the last rank wrapper's start report, both taken on
the hosts) and the stamps' (the benchmark's clock just before it starts the entrypoints -> the last
rank program's process start, read by the program from /proc).  Cluster name h10bl.
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_launch  # noqa: E402

from mpirun_kit.spec.launch_spec import Timeouts  # noqa: E402

pytestmark = [pytest.mark.sim, pytest.mark.timeout(300)]

#: how far apart the two measurements of one launch may be (the issue's bound).
AGREE_S = 0.05


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from mpirun_kit.sim import SimCluster

    with SimCluster(3, tmp_path_factory.mktemp("h10bl"), "h10bl") as sim:
        yield sim


def test_timeline_launch_matches_the_stamps(sim):
    t0, procs = bench_launch.run_job(sim, timeouts=Timeouts(ssh_ready_s=60.0, master_connect_s=60.0))
    exits = bench_launch.wait_exits(procs, 120)
    assert {h: c for h, (_, c) in exits.items()} == {"algo-1": 0, "algo-2": 0, "algo-3": 0}, \
        procs["algo-1"].output()
    data = bench_launch.timeline_of(sim)
    assert len(data["ranks"]) == 6 and len(bench_launch.stamps(sim, "proc")) == 6
    fig = bench_launch.figures(data)
    by_stamps = bench_launch.stamps_launch(sim, t0)
    assert fig["launch"] > 0 and by_stamps > 0
    assert abs(fig["launch"] - by_stamps) <= AGREE_S, (fig, by_stamps)
    # the other figures are read from the same file: each one present and in order
    assert 0 < fig["to_mpirun"] < fig["launch"] and fig["tail"] > 0 and fig["fanout"] is None


def test_fanout_is_read_from_the_failing_rank(sim):
    _, procs = bench_launch.run_job(sim, crash=5, timeouts=Timeouts(ssh_ready_s=60.0, master_connect_s=60.0))
    exits = bench_launch.wait_exits(procs, 120)
    assert all(c == 3 for _, c in exits.values()), exits
    data = bench_launch.timeline_of(sim)
    crashed = [r for r in data["ranks"] if r.get("exit_code") == 3]
    assert [r["rank"] for r in crashed] == [5], data["ranks"]
    fig = bench_launch.figures(data)
    master_exit = bench_launch.phase_t(data, "algo-1", "exited")
    assert fig["fanout"] == pytest.approx(master_exit - crashed[0]["exited"])
    assert fig["fanout"] > 0


def test_account_has_every_phase_in_order_beside_the_floor(tmp_path):
    """Issue 41: the account (d) at 2 hosts, 1 run (its own cluster, h41ac2): every phase of the launch, each no
    earlier than the one it waits for, the floor's three phases from the same run, and the toolkit's CPU per
    rank; the table names them all.  Shape only: no figure is compared with a time limit."""
    row = bench_launch.one_n(2, 1, tmp_path, launch_only=True, name="h41ac")
    ours, floor = row["account"]["ours"], row["account"]["floor"]
    assert list(ours) == [*bench_launch.ACCOUNT, *bench_launch.TAIL, "cpu_launch", "cpu_job"] and list(floor) == list(
        bench_launch.FLOOR_ACCOUNT)
    assert all(v is not None and v >= 0 for v in (*ours.values(), *floor.values())), row["account"]
    order = ("mpirun started", "daemons up", "wrappers started", "keys taken", "programs started", "first output")
    tick = 0.011        # /proc's process start times come in 10 ms ticks
    assert all(ours[a] <= ours[b] + tick for a, b in zip(order, order[1:])), ours
    assert ours["entrypoints started"] <= ours["sshd ready"] <= ours["mpirun started"], ours
    assert floor["daemons up"] <= floor["programs started"] + tick <= floor["first output"] + 2 * tick, floor
    assert 0 < ours["cpu_launch"] <= ours["cpu_job"]
    table = bench_launch.account_table([row])
    assert all(f"| {k} |" in table for k in (*bench_launch.ACCOUNT, *bench_launch.TAIL))
    assert "toolkit CPU per rank" in table


def test_an_older_trees_timeline_gives_what_it_holds():
    """The account of a tree before issue 41 (the benchmark copied into an older checkout): its entrypoints'
    phases and each rank's program start; the wrappers' phases and the CPU per rank unknown ("-")."""
    def rec(phase, t):
        return {"phase": phase, "t": t, "mono": t, "cpu_s": 0.05}

    data = {"version": 1, "hosts": {
        "algo-1": {"role": "master", "phases": [rec("started", 10.0), rec("ready", 10.3), rec("mpirun_started", 10.3)]},
        "algo-2": {"role": "worker", "phases": [rec("started", 10.1), rec("ready", 10.2), rec("daemon_up", 11.0)]}},
        "ranks": [{"rank": 0, "host": "algo-1", "started": 11.5}, {"rank": 1, "host": "algo-2", "started": 11.6}]}
    acc = bench_launch.older_account(data)
    got = {k: None if v is None else round(v, 3) for k, v in acc["phases"].items()}
    assert got == {"entrypoints started": 0.1, "sshd ready": 0.3, "key hand-off": None, "mpirun started": 0.3,
                   "daemons up": 1.0, "wrappers started": None, "keys taken": None, "programs started": 1.6,
                   "channel hello": None}
    assert acc["cpu"]["per_rank_launch_s"] is None
