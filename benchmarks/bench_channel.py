"""Load benchmark of the master's result channel at the scale of a 256-host x 8-GPU job.

The real ``ResultServer`` (exec/channel/server.py) runs in this process, configured as the master
configures it (entrypoint/master.py): the plan's rank placement, its workers, the progress
checker of observe/hang.py and the hang watch's table behind ``on_rank_event``.  Every
connection comes from 127.0.0.1 here, so the server's own ``allowed_peers`` is set to
``{"127.0.0.1"}`` (the master passes the plan's host addresses); nothing else is relaxed.

A few client processes (``--clients``) each hold a share of the connections on one
``selectors`` loop, made and used by the real senders:

* rank-like: a ``RankLink`` (exec/channel/rank_link.py, what the rank wrapper uses; its key derived
  from the run key as the master derives it, keys.py) with a start
  report, then ``--rate`` ``progress`` reports per second (default 1; phases spread evenly),
  each stamped ``t = time.time()`` just before it is signed and sent, as relay.py does;
  an exit report at the end;
* worker-like: ``MasterLink.connect`` (hello), then ``{"type": "heartbeat"}`` every
  second (protocol.HEARTBEAT_S) through ``MasterLink.send`` as entrypoint/worker.py does, reading (and
  dropping) the master's heartbeats so that the master never sees a full socket.

Figures, over the measured window (after every connection is up, for ``--seconds``):

* the master's CPU share: this process's CPU time (``resource.getrusage``: the channel's
  loop thread, plus a main thread that only sleeps) over wall time; 100 % = one core;
* the delay of each progress report from its ``t`` in the client to the moment the server
  hands it to ``on_rank_event`` (the master's record), p50 / p99 / max; goal p99 <= 50 ms;
* messages sent / recorded / rejected, so that a loss or a refusal shows.

Clients and server share this machine's cores (and its clock): on a loaded machine the
delays include waiting for a CPU.  Note ``uptime`` next to the figures.

    python benchmarks/bench_channel.py                        # 256 hosts x 8, 30 s
    python benchmarks/bench_channel.py --hosts 32 --seconds 10 --json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline  # noqa: E402
from mpirun_kit.exec.channel.keys import host_seed, rank_key, worker_key_from_secret  # noqa: E402
from mpirun_kit.exec.channel.link import MasterLink  # noqa: E402
from mpirun_kit.exec.channel.rank_link import RankLink  # noqa: E402
from mpirun_kit.exec.channel.server import ResultServer  # noqa: E402
from mpirun_kit.observe.hang import HangWatch, check_observe_report  # noqa: E402

#: open files each side needs beyond its sockets.
_FD_SLACK = 256


def raise_nofile(wanted: int) -> int:
    """Lift the soft open-file limit to ``wanted`` (at most the hard limit); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def placement(hosts: int, per_host: int) -> tuple[dict[int, str], list[str]]:
    """(rank -> host, worker hosts) as a plan of ``hosts`` x ``per_host`` places them."""
    rank_hosts = {r: f"algo-{r // per_host + 1}" for r in range(hosts * per_host)}
    return rank_hosts, [f"algo-{i}" for i in range(2, hosts + 1)]


# -- the client side (a subprocess per share) -------------------------------------------------
def client_main(cfg: dict, wait_go) -> dict:
    """Connect this share's connections, tell the parent, wait for ``wait_go()`` -> {"go", "end"} (wall
    clock), then drive them until "end"; returns what was sent."""
    raise_nofile(len(cfg["ranks"]) + len(cfg["workers"]) + _FD_SLACK)
    run_key, worker_key, job = bytes.fromhex(cfg["run_key"]), bytes.fromhex(cfg["worker_key"]), cfg["job"]
    addr = f"127.0.0.1:{cfg['port']}"
    sel = selectors.DefaultSelector()
    ranks: dict[int, object] = {}
    for r, host in cfg["ranks"]:
        rl = RankLink(addr, r, rank_key(host_seed(run_key, job, host), job, r), job, timeout=30.0)
        if not rl.send({"rank": r, "host": host, "event": "start", "local_rank": r % 8, "pid": os.getpid(),
                        "t": time.time()}):
            raise SystemExit(f"bench client: rank {r} could not connect to {addr}")
        ranks[r] = (host, rl)
        sel.register(rl.sock, selectors.EVENT_READ, None)
    links = []
    for host in cfg["workers"]:
        link = MasterLink.connect("127.0.0.1", cfg["port"], host, Deadline(SYSTEM_CLOCK, 30.0), key=worker_key,
                                  job=job)
        link.sock.setblocking(True)
        sel.register(link.sock, selectors.EVENT_READ, link)
        links.append(link)
    print(json.dumps({"connected": len(ranks) + len(links)}), flush=True)   # the parent waits for this line
    cfg = {**cfg, **wait_go()}

    # One schedule per second: every rank ``rate`` times and every worker once, each at its own phase.
    n_all, rate = cfg["n_ranks"] + cfg["n_workers"], cfg["rate"]
    sched = sorted([((r / n_all + j) / rate, "r", r) for r in ranks for j in range(rate)]
                   + [((cfg["n_ranks"] + int(h.split("-")[1]) - 2) / n_all, "w", i) for i, h in
                      enumerate(cfg["workers"])])
    sent = {"progress": 0, "heartbeat": 0, "failed": 0}
    step = dict.fromkeys(ranks, 0)
    cycle, i = cfg["go"], 0
    while True:
        if i == len(sched):
            cycle, i = cycle + 1.0, 0
        due = cycle + sched[i][0]
        if due >= cfg["end"]:
            break
        while True:
            left = due - time.time()
            for key, _ in sel.select(max(0.0, left)):   # drain the master's heartbeats
                try:
                    if not key.fileobj.recv(65536):
                        sel.unregister(key.fileobj)
                except OSError:
                    sel.unregister(key.fileobj)
            if left <= 0:
                break
        _, kind, who = sched[i]
        i += 1
        if kind == "r":
            host, rl = ranks[who]
            step[who] += 1
            # relay.py's _send: {ident, event, step, "t": time.time()} through the rank's link.
            ok = rl.send({"rank": who, "host": host, "event": "progress", "step": step[who], "t": time.time()})
            sent["progress" if ok else "failed"] += 1
        else:
            links[who].send({"type": "heartbeat"})
            sent["heartbeat"] += 1
    for r, (host, rl) in ranks.items():
        rl.send({"rank": r, "host": host, "event": "exit", "exit_code": 0, "signal": None, "t": time.time()})
    time.sleep(0.5)   # let the exits land before the FINs
    for _, rl in ranks.values():
        rl.close()
    for link in links:
        link.close()
    return sent


# -- the master side --------------------------------------------------------------------------
class Recorder:
    """The server's ``on_rank_event``: the master's hang-watch table, plus the delay of each report."""

    def __init__(self, rank_hosts: dict[int, str], window: tuple[float, float]):
        self.watch = HangWatch(rank_hosts, stall_s=3600.0)
        self.window = window
        self.delays: list[float] = []
        self.progress = self.starts = self.exits = 0
        self.last_step: dict[int, int] = {}     # rank -> the last step recorded (steps go 1, 2, 3, ...)

    def check(self, msg: dict, rank_hosts) -> tuple[dict | None, str]:
        """observe/hang.py's checker; the clean report keeps the sender's ``t`` for the delay only."""
        clean, why = check_observe_report(msg, rank_hosts)
        if clean is not None:
            clean["_sent"] = msg["t"]
        return clean, why

    def on_rank_event(self, msg: dict) -> None:
        now = time.time()
        event = msg["event"]
        if event == "progress":
            self.watch.progress(msg["rank"], msg["step"])
            self.progress += 1
            if msg["step"] == self.last_step.get(msg["rank"], 0) + 1:   # in order, none missing
                self.last_step[msg["rank"]] = msg["step"]
            if self.window[0] <= msg["_sent"] < self.window[1]:
                self.delays.append(now - msg["_sent"])
        elif event == "start":
            self.starts += 1
        elif event == "exit":
            self.watch.exited(msg["rank"])
            self.exits += 1


def _pct(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def run_load(hosts: int = 256, per_host: int = 8, seconds: int = 30, clients: int = 4,
             settle_s: float = 1.0, rate: int = 1) -> dict:
    """Run the load once; returns the figures (see the module docstring).  Each rank sends exactly
    ``rate * seconds`` progress reports (steps 1, 2, ...), each worker ``seconds`` heartbeats."""
    rank_hosts, workers = placement(hosts, per_host)
    n_conn = len(rank_hosts) + len(workers)
    raise_nofile(n_conn + _FD_SLACK)
    run_key, secret, job = os.urandom(32), os.urandom(32), "bench-job"
    worker_key = worker_key_from_secret(secret, job)
    window = [0.0, 0.0]
    rec = Recorder(rank_hosts, window)            # window filled in once every client is connected
    server = ResultServer("127.0.0.1", 0, job=job, run_key=run_key, worker_key=worker_key, rank_hosts=rank_hosts,
                          workers=workers, allowed_peers={"127.0.0.1"}, worker_silence_s=10.0,
                          host_addresses={h: {"127.0.0.1"} for h in set(rank_hosts.values())},
                          on_rank_event=rec.on_rank_event, check_other=rec.check).start()
    procs = []
    try:
        t0 = time.time()
        for c in range(clients):
            cfg = {"port": server.port, "run_key": run_key.hex(), "worker_key": worker_key.hex(), "job": job,
                   "ranks": [(r, h) for r, h in rank_hosts.items() if r % clients == c],
                   "workers": workers[c::clients], "n_ranks": len(rank_hosts), "n_workers": len(workers),
                   "rate": rate}
            procs.append((subprocess.Popen([sys.executable, __file__, "--client"], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True), cfg))
        # Every client connects first; then all start at the same go time (a second line on their stdin),
        # so the window sees the full load.
        for p, cfg in procs:
            p.stdin.write(json.dumps(cfg) + "\n")
            p.stdin.flush()
        for p, _ in procs:
            line = p.stdout.readline()
            if not line:
                raise SystemExit(f"bench: a client exited before connecting (code {p.wait()})")
        connected_s = time.time() - t0
        go_at = time.time() + settle_s
        window[0], window[1] = go_at, go_at + seconds
        for p, _ in procs:
            p.stdin.write(json.dumps({"go": go_at, "end": go_at + seconds}) + "\n")
            p.stdin.close()
        time.sleep(max(0.0, go_at - time.time()))
        ru0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.time()
        time.sleep(max(0.0, go_at + seconds - time.time()))
        ru1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.time()
        lost = sorted(server.lost_workers())     # now, while every worker still heartbeats
        sent = {"progress": 0, "heartbeat": 0, "failed": 0}
        for p, _ in procs:
            out = p.stdout.read()
            if p.wait() != 0:
                raise SystemExit(f"bench: a client failed (code {p.returncode})")
            for k, v in json.loads(out.strip().splitlines()[-1]).items():
                sent[k] += v
        # Everything sent should be recorded; give the loop a moment to finish the last lines.
        deadline = time.time() + 10.0
        while (rec.progress < sent["progress"] or rec.exits < len(rank_hosts)) and time.time() < deadline:
            time.sleep(0.05)
    finally:
        for p, _ in procs:
            if p.poll() is None:   # only after a failure: kill what this run started
                p.kill()
                p.wait()
        server.close()
    user, system = ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime
    d = sorted(rec.delays)
    return {
        "hosts": hosts, "ranks": len(rank_hosts), "reports_per_rank_s": rate, "workers": len(workers), "connections": n_conn,
        "clients": clients, "seconds": round(w1 - w0, 2), "connect_s": round(connected_s, 2),
        "sent_progress": sent["progress"], "sent_heartbeats": sent["heartbeat"], "send_failures": sent["failed"],
        "recorded_progress": rec.progress, "recorded_starts": rec.starts, "recorded_exits": rec.exits,
        "rejected": len(server.rejected()), "rejected_reasons": sorted({r.reason for r in server.rejected()})[:10],
        "ranks_with_every_step": sum(1 for r in rank_hosts if rec.last_step.get(r) == rate * seconds),
        "lost_workers": lost, "connected_workers": len(server.connected_workers()),
        "messages_per_s": round((sent["progress"] + sent["heartbeat"]) / max(1e-9, w1 - w0), 1),
        "master_cpu_share": round((user + system) / max(1e-9, w1 - w0), 4),
        "master_cpu_user_share": round(user / max(1e-9, w1 - w0), 4),
        "master_cpu_system_share": round(system / max(1e-9, w1 - w0), 4),
        "delay_samples": len(d), "delay_p50_ms": round(_pct(d, 0.50) * 1e3, 2),
        "delay_p99_ms": round(_pct(d, 0.99) * 1e3, 2), "delay_max_ms": round((d[-1] if d else float("nan")) * 1e3, 2),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=256)
    ap.add_argument("--per-host", type=int, default=8, help="ranks per host (GPUs)")
    ap.add_argument("--seconds", type=int, default=30, help="measured window (the run stops by itself)")
    ap.add_argument("--rate", type=int, default=1, help="progress reports per rank per second (the rank "
                    "wrapper sends at most 2: observe/relay.py PROGRESS_EVERY_S)")
    ap.add_argument("--clients", type=int, default=4, help="client processes driving the connections")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.client:
        cfg = json.loads(sys.stdin.readline())
        sent = client_main(cfg, lambda: json.loads(sys.stdin.readline()))
        print(json.dumps(sent), flush=True)
        return 0
    r = run_load(a.hosts, a.per_host, a.seconds, a.clients, rate=a.rate)
    if a.json:
        print(json.dumps(r))
    else:
        print(f"{r['connections']} connections ({r['ranks']} ranks + {r['workers']} workers, {r['clients']} client "
              f"processes), all up in {r['connect_s']} s; {r['messages_per_s']} messages/s for {r['seconds']} s")
        print(f"master CPU share: {r['master_cpu_share'] * 100:.1f} % of one core (user "
              f"{r['master_cpu_user_share'] * 100:.1f} %, system {r['master_cpu_system_share'] * 100:.1f} %)")
        print(f"report send -> record delay: p50 {r['delay_p50_ms']} ms, p99 {r['delay_p99_ms']} ms, "
              f"max {r['delay_max_ms']} ms ({r['delay_samples']} reports)  [goal p99 <= 50 ms]")
        print(f"progress sent {r['sent_progress']}, recorded {r['recorded_progress']}; starts {r['recorded_starts']}, "
              f"exits {r['recorded_exits']}; rejected {r['rejected']} {r['rejected_reasons']}; "
              f"lost workers {r['lost_workers']}; load average {r['load_avg']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
