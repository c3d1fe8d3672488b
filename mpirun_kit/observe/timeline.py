"""The launch timeline as data: phases recorded by every entrypoint, merged by the master.

Data flow: each entrypoint owns a ``Recorder`` and marks its phases as they happen
(wall-clock ``t``, this host's ``mono``, and the entrypoint's own CPU time ``cpu_s``, so
a slow phase can be told apart from a starved one).  A worker sends its records to the
master with its ack (channel.py); the master adds the ranks' start/exit reports it
received and writes ``<opt_ml>/output/timeline.json`` atomically.  ``mpirun_kit
timeline FILE`` (cli/timeline.py) reads it back through ``load``: the critical path in
text, a per-host Gantt chart as a PNG.

Cross-host comparisons use ``t`` (wall-clock: hosts' clocks are NTP-synced on
SageMaker); ``mono`` is only ever compared with the same host's.  A worker's records end
at "acked": what it does after its ack cannot reach the master any more.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from ..core.clock import SYSTEM_CLOCK, Clock
from ..core.files import write_atomic
from ..errors import SpecError

VERSION = 1
#: every phase an entrypoint records, in the order they happen on one host.
#: master: started, sshd_up, ready (all workers' sshd answered), mpirun_started, mpirun_exited,
#: result_published, acked (every worker acknowledged), exited.
#: worker: started, sshd_up, ready (connected to the master), keys_written (its ranks' key files, from the seed
#: the master answered its hello with), daemon_up, result_received, acked.
PHASES = ("started", "sshd_up", "ready", "keys_written", "mpirun_started", "daemon_up", "mpirun_exited",
          "result_published", "result_received", "acked", "exited")
MASTER_PHASES = ("started", "sshd_up", "ready", "mpirun_started", "mpirun_exited", "result_published",
                 "acked", "exited")
WORKER_PHASES = ("started", "sshd_up", "ready", "keys_written", "daemon_up", "result_received", "acked")
#: what a rank's wrapper adds to its start and exit reports (exec/channel/protocol.py), as the rank's row
#: names it: when its parent (the MPI daemon, or mpirun on the master's host) and the wrapper itself started,
#: when it had its key (its host's other ranks theirs too), its CPU from its exec to its program's start, when
#: its channel connection was greeted, its whole CPU at exit.
RANK_ACCOUNT = {"start": (("parent_t", "daemon_started"), ("proc_t", "wrapper_started"), ("key_t", "key_taken"),
                          ("cpu_s", "cpu_to_program_s")),
                "exit": (("hello_t", "hello"), ("cpu_s", "wrapper_cpu_s"))}
#: at most this many records per host are accepted from a worker (hostile input is capped).
MAX_RECORDS = 32


def cpu_seconds() -> float:
    """This process's CPU time (user + system), children that were waited for included."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def own_cpu_seconds() -> float:
    """This process's own CPU time (user + system): the toolkit's share, mpirun's (a waited child) left out."""
    t = os.times()
    return t.user + t.system


def process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc; 10 ms resolution), or None."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Recorder:
    """One entrypoint's phases, in the order marked.  ``mark`` never raises."""

    host: str
    role: str
    clock: Clock = SYSTEM_CLOCK
    records: list[dict] = field(default_factory=list)
    #: the master's: the stall the hang monitor found (observe/hang.py ``hang_json``) and the job's exit code,
    #: for the chart's stall and stop marks.
    hang: dict | None = None
    exit_code: int | None = None

    def mark(self, phase: str, **extra) -> dict:
        rec = {"phase": phase, "t": self.clock.time(), "mono": self.clock.monotonic(), "cpu_s": cpu_seconds(),
               "own_cpu_s": own_cpu_seconds(), **extra}
        self.records.append(rec)
        return rec

    def mark_process_start(self) -> dict | None:
        """Mark "started" at this process's start (from /proc: its age in clock ticks), so the
        interpreter's own start-up and imports count; None where /proc does not say."""
        age = process_age_s()
        if age is None:
            return None
        rec = {"phase": "started", "t": self.clock.time() - age, "mono": self.clock.monotonic() - age, "cpu_s": 0.0}
        self.records.append(rec)
        return rec

    def as_list(self) -> list[dict]:
        return [dict(r) for r in self.records]


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def clean_records(raw) -> list[dict] | None:
    """A worker's records reduced to known phases and finite numbers; None when not a list of them.

    The list comes over the network (signed, but still validated like any peer input).
    """
    if not isinstance(raw, list) or len(raw) > MAX_RECORDS:
        return None
    out = []
    for r in raw:
        if not isinstance(r, dict) or r.get("phase") not in PHASES:
            return None
        if not all(_finite(r.get(k)) for k in ("t", "mono", "cpu_s")):
            return None
        out.append({"phase": r["phase"], "t": float(r["t"]), "mono": float(r["mono"]), "cpu_s": float(r["cpu_s"])})
        if _finite(r.get("own_cpu_s")):     # optional (an older entrypoint's records have none)
            out[-1]["own_cpu_s"] = float(r["own_cpu_s"])
    return out


def merge(master: Recorder, workers: Mapping[str, list[dict]], rank_events: Iterable[dict],
          expected_workers: Iterable[str] = ()) -> dict:
    """The job's timeline: every host's phases (master first), and every rank's start and exit."""
    hosts = {master.host: {"role": "master", "phases": master.as_list()}}
    for h in sorted(expected_workers):
        hosts.setdefault(h, {"role": "worker", "phases": []})
    for h, recs in sorted(workers.items()):
        hosts[h] = {"role": "worker", "phases": list(recs)}
    ranks: dict[int, dict] = {}
    for ev in rank_events:
        if ev.get("event") not in ("start", "exit"):
            continue
        r = ranks.setdefault(ev["rank"], {"rank": ev["rank"], "host": ev["host"]})
        r["started" if ev["event"] == "start" else "exited"] = ev["t"]
        if ev["event"] == "exit":
            r["exit_code"], r["signal"] = ev.get("exit_code"), ev.get("signal")
        for sent, name in RANK_ACCOUNT[ev["event"]]:
            if _finite(ev.get(sent)):
                r[name] = ev[sent]
    data = {"version": VERSION, "hosts": hosts, "ranks": [ranks[k] for k in sorted(ranks)]}
    # How the job ended, for the chart's stop marks: its exit code, and the stall the hang monitor found
    # (observe/hang.py hang_json: when, which ranks, their last frames).
    if master.exit_code is not None:
        data["exit_code"] = master.exit_code
    if master.hang is not None:
        data["hang"] = master.hang
    return data


def write(opt_ml: Path, data: dict) -> Path:
    """Write ``<opt_ml>/output/timeline.json`` atomically.

    Raises:
        OSError: the output directory cannot be written.
    """
    return write_atomic(Path(opt_ml) / "output" / "timeline.json", json.dumps(data, indent=1) + "\n", 0o600)


def load(path: Path) -> dict:
    """Read and check a timeline file.

    Raises:
        SpecError: the file is missing, not JSON, or not a timeline (names the file and what is wrong).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_bytes())
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the timeline ({exc.strerror}); give the timeline.json a job wrote "
                        "to <opt_ml>/output/") from exc
    except (ValueError, RecursionError) as exc:
        raise SpecError(f"{path}: not a timeline: not valid JSON ({str(exc)[:80]}); give the timeline.json "
                        "a job wrote to <opt_ml>/output/") from exc
    why = _problem(data)
    if why:
        raise SpecError(f"{path}: not a timeline: {why}; give the timeline.json a job wrote to <opt_ml>/output/")
    return data


def _problem(data) -> str:
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return f"expected a JSON object with \"version\": {VERSION}"
    hosts = data.get("hosts")
    if not isinstance(hosts, dict) or not hosts:
        return "field 'hosts' is missing or empty"
    for name, h in hosts.items():
        if not isinstance(h, dict) or h.get("role") not in ("master", "worker"):
            return f"host {name!r}: expected an object with role master or worker"
        if clean_records(h.get("phases")) is None:
            return f"host {name!r}: field 'phases' is not a list of known phases with finite times"
    ranks = data.get("ranks")
    if not isinstance(ranks, list) or not all(isinstance(r, dict) and r.get("host") in hosts for r in ranks):
        return "field 'ranks' must be a list of ranks on the listed hosts"
    account = [name for pairs in RANK_ACCOUNT.values() for _, name in pairs]
    for r in ranks:
        if not all(_finite(r[k]) for k in ("started", "exited", *account) if k in r):
            return f"rank {r.get('rank')!r}: start/exit times and the wrapper's figures must be finite numbers"
    if "exit_code" in data and not (isinstance(data["exit_code"], int) and not isinstance(data["exit_code"], bool)):
        return "field 'exit_code' must be an integer"
    hang = data.get("hang")
    if hang is not None and not (isinstance(hang, dict) and _finite(hang.get("detected_at"))
                                 and isinstance(hang.get("ranks"), list)
                                 and all(isinstance(r, dict) for r in hang["ranks"])):
        return "field 'hang' must be an object with a finite 'detected_at' and a list 'ranks'"
    return ""


def failed_rank(r: dict) -> bool:
    """A rank that ended badly: killed, or a non-zero exit code."""
    return bool(r.get("signal")) or bool(r.get("exit_code"))


def outcome_line(data: dict) -> str:
    """How the job ended, in words: "" for a success (or an older file that does not say)."""
    parts = []
    code = data.get("exit_code")
    if code:
        parts.append(f"job failed with exit code {code}")
    bad = [r for r in data["ranks"] if failed_rank(r)]
    if bad:
        parts.append("ranks ended badly: " + ", ".join(
            f"{r['rank']} ({'killed by ' + r['signal'] if r.get('signal') else 'exit ' + str(r['exit_code'])})"
            for r in bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else ""))
    hang = data.get("hang")
    if hang:
        sus = hang.get("suspects") or []
        parts.append(("a rank exited alone" if hang.get("kind") == "exit" else "hang reported")
                     + (f" (suspects: {', '.join(map(str, sus))})" if sus else " (no suspect singled out)"))
    return "; ".join(parts)


def master_of(data: dict) -> str:
    return next(h for h, v in data["hosts"].items() if v["role"] == "master")


def _phase(data: dict, host: str, phase: str) -> float | None:
    for r in data["hosts"][host]["phases"]:
        if r["phase"] == phase:
            return r["t"]
    return None


@dataclass(frozen=True)
class Step:
    """One link of the critical path: ``what`` ended at ``t``, ``took`` seconds after the previous link."""

    what: str
    t: float
    took: float


def critical_path(data: dict) -> list[Step]:
    """The chain of waits that decided how long the job took, from the first host's start to the master's exit.

    Each link is the *last* of its kind (the slowest worker, the last rank to start),
    because that one is what the next phase waited for.
    """
    master = master_of(data)
    workers = [h for h, v in data["hosts"].items() if v["role"] == "worker"]
    marks: list[tuple[str, float | None]] = []
    starts = [(_phase(data, h, "started"), h) for h in data["hosts"]]
    starts = [s for s in starts if s[0] is not None]
    if starts:
        t, h = min(starts)
        marks.append((f"first entrypoint started ({h})", t))
    marks.append((f"master {master} started", _phase(data, master, "started")))
    for phase, what in (("sshd_up", "last worker sshd up"), ("keys_written", "last worker wrote its ranks' key files")):
        seen = [(t, h) for t, h in ((_phase(data, h, phase), h) for h in workers) if t is not None]
        if seen:
            t, h = max(seen)
            marks.append((f"{what} ({h})", t))
    marks.append(("every sshd answered the master", _phase(data, master, "ready")))
    marks.append(("mpirun started", _phase(data, master, "mpirun_started")))
    ranks = data["ranks"]
    # the wrappers' own account (rank/wrapper.py), where they sent it: the last rank's daemon, wrapper, key
    for name, what in (("daemon_started", "last rank's MPI daemon started"), ("wrapper_started",
                         "last rank wrapper started"), ("key_taken", "last rank wrapper had its key")):
        got = [(r[name], r["rank"], r["host"]) for r in ranks if name in r]
        if got:
            t, rank, host = max(got)
            marks.append((f"{what} (rank {rank} on {host})", t))
    started = [(r["started"], r["rank"], r["host"]) for r in ranks if "started" in r]
    if started:
        t, rank, host = max(started)
        marks.append((f"last rank started (rank {rank} on {host})", t))
    exited = [(r["exited"], r["rank"], r["host"]) for r in ranks if "exited" in r]
    if exited:
        t, rank, host = max(exited)
        marks.append((f"last rank exited (rank {rank} on {host})", t))
    hang = data.get("hang")
    if hang:
        sus = ", ".join(map(str, hang.get("suspects") or [])) or "none singled out"
        marks.append((f"{'rank exiting alone' if hang.get('kind') == 'exit' else 'hang'} reported "
                      f"(suspects: {sus})", hang["detected_at"]))
    marks.append(("mpirun exited", _phase(data, master, "mpirun_exited")))
    marks.append(("result published", _phase(data, master, "result_published")))
    marks.append(("every worker acknowledged", _phase(data, master, "acked")))
    marks.append((f"master {master} exited", _phase(data, master, "exited")))
    out: list[Step] = []
    # In time order: the links come from several hosts' clocks (and a hang report from the middle of the run),
    # so the logical order above can put a later time first; sorted, no link takes negative time.
    for what, t in sorted(((w, t) for w, t in marks if t is not None), key=lambda m: m[1]):
        out.append(Step(what, t, t - out[-1].t if out else 0.0))
    return out


def summary(data: dict) -> dict:
    """Launch (first start -> last rank started), run, shutdown (last rank exit -> master exit) and CPU per host."""
    path = critical_path(data)
    t0 = path[0].t if path else 0.0
    ranks = data["ranks"]
    last_start = max((r["started"] for r in ranks if "started" in r), default=None)
    last_exit = max((r["exited"] for r in ranks if "exited" in r), default=None)
    end = _phase(data, master_of(data), "exited") or (path[-1].t if path else None)
    cpu = {}
    for h, v in data["hosts"].items():
        # CPU time spent getting the job going: up to mpirun's start (master) or the daemon's (worker).
        upto = [r["cpu_s"] for r in v["phases"] if r["phase"] in ("mpirun_started", "daemon_up")]
        if upto:
            cpu[h] = upto[0]
    return {
        "launch_s": None if last_start is None else last_start - t0,
        "run_s": None if last_start is None or last_exit is None else last_exit - last_start,
        "shutdown_s": None if last_exit is None or end is None else end - last_exit,
        "total_s": None if end is None else end - t0,
        "startup_cpu_s": cpu,
        "exit_code": data.get("exit_code"),
        "hang": data.get("hang"),
    }


#: the launch account's phases (``launch_account``), in the order they happen.
ACCOUNT_PHASES = ("entrypoints started", "sshd ready", "key hand-off", "mpirun started", "daemons up",
                  "wrappers started", "keys taken", "programs started", "channel hello")


def _own_cpu(phases: list[dict], upto: tuple[str, ...] = ()) -> float | None:
    """An entrypoint's own CPU at its first phase in ``upto`` (none given: at its last record)."""
    recs = [r for r in phases if "own_cpu_s" in r and (not upto or r["phase"] in upto)]
    if not recs:
        return None
    return (recs[0] if upto else recs[-1])["own_cpu_s"]


def launch_account(data: dict) -> dict:
    """Where the launch's time and CPU went: for each of ``ACCOUNT_PHASES``, the seconds from the first
    entrypoint's start to the *last* host or rank that reached it (what the next phase waited for; None where
    the timeline does not say: an older entrypoint or wrapper, or no worker); and the CPU the toolkit's own
    processes spent (entrypoints without mpirun, wrappers without their programs), in all and per rank: up to
    the launch (entrypoints to mpirun's start or their daemon's, wrappers to their program's start) and in the
    whole job."""
    path = critical_path(data)
    t0 = path[0].t if path else 0.0
    master = master_of(data)
    hosts = data["hosts"]
    workers = [h for h, v in hosts.items() if v["role"] == "worker"]
    ranks = data["ranks"]

    def last(ts):
        ts = [t for t in ts if t is not None]
        return max(ts) - t0 if ts else None

    phases = {
        "entrypoints started": last(_phase(data, h, "started") for h in hosts),
        "sshd ready": last([_phase(data, master, "ready")]),
        "key hand-off": last(_phase(data, h, "keys_written") for h in workers),
        "mpirun started": last([_phase(data, master, "mpirun_started")]),
        "daemons up": last(r.get("daemon_started") for r in ranks),
        "wrappers started": last(r.get("wrapper_started") for r in ranks),
        "keys taken": last(r.get("key_taken") for r in ranks),
        "programs started": last(r.get("started") for r in ranks),
        "channel hello": last(r.get("hello") for r in ranks),
    }
    ep_launch = [_own_cpu(v["phases"], ("mpirun_started", "daemon_up")) for v in hosts.values()]
    ep_all = [_own_cpu(v["phases"]) for v in hosts.values()]
    wr_launch = [r.get("cpu_to_program_s") for r in ranks]
    wr_all = [r.get("wrapper_cpu_s") for r in ranks]

    def total(xs):
        return None if not xs or any(x is None for x in xs) else sum(xs)

    cpu = {"entrypoints_launch_s": total(ep_launch), "wrappers_launch_s": total(wr_launch),
           "entrypoints_s": total(ep_all), "wrappers_s": total(wr_all)}
    n = len(ranks)
    for part in ("launch", "job"):
        a, b = (cpu["entrypoints_launch_s"], cpu["wrappers_launch_s"]) if part == "launch" else \
            (cpu["entrypoints_s"], cpu["wrappers_s"])
        cpu[f"per_rank_{part}_s"] = None if a is None or b is None or not n else (a + b) / n
    return {"phases": phases, "cpu": cpu, "ranks": n}


def account_line(data: dict) -> str:
    """``launch_account`` in one line: each phase's seconds, then the toolkit's CPU per rank; "" when the
    timeline has no wrapper figures (an older wrapper)."""
    acc = launch_account(data)
    if acc["phases"]["wrappers started"] is None:
        return ""
    steps = ", ".join(f"{k} {v:.2f}" for k, v in acc["phases"].items() if v is not None)
    cpu = acc["cpu"]

    def ms(v):
        return "-" if v is None else f"{v * 1000:.0f} ms"

    return (f"launch account (s from the first start to the last of each): {steps}; toolkit CPU per rank: "
            f"{ms(cpu['per_rank_launch_s'])} to the programs' start, {ms(cpu['per_rank_job_s'])} in the job")


def summary_line(data: dict) -> str:
    s = summary(data)

    def f(v):
        return "-" if v is None else f"{v:.2f} s"

    return (f"timeline: launch {f(s['launch_s'])}, run {f(s['run_s'])}, shutdown {f(s['shutdown_s'])}, "
            f"total {f(s['total_s'])} on {len(data['hosts'])} host(s), {len(data['ranks'])} rank(s)")


def render_text(data: dict) -> str:
    path = critical_path(data)
    t0 = path[0].t if path else 0.0
    lines = ["critical path (seconds from the first entrypoint's start):"]
    for s in path:
        lines.append(f"  {s.t - t0:8.3f}  +{s.took:6.3f}  {s.what}")
    cpu = summary(data)["startup_cpu_s"]
    if cpu:
        lines.append("entrypoint CPU time during start-up (to mpirun/daemon start): "
                     + ", ".join(f"{h} {c:.2f} s" for h, c in cpu.items()))
    account = account_line(data)
    if account:
        lines.append(account)
    lines.append(summary_line(data))
    ending = outcome_line(data)
    if ending:
        lines.append(ending)
    hang = data.get("hang")
    for r in (hang or {}).get("ranks", [])[:16]:
        if r.get("suspect") or r.get("frames"):
            lines.append(f"  {'*' if r.get('suspect') else ' '} rank {r.get('rank')} on {r.get('host')}: "
                         f"{r.get('why') or r.get('where') or r.get('state')}")
    return "\n".join(lines)


#: the Gantt bars: one per span between consecutive phases, named (and coloured) by the phase it ends in.
_SPANS = {"sshd_up": ("start-up", "#c6dbef"), "ready": ("waiting for sshd / the master", "#6baed6"),
          "keys_written": ("key hand-off", "#fdd0a2"),
          "mpirun_started": ("planning", "#08519c"), "daemon_up": ("waiting for mpirun's daemon", "#9e9ac8"),
          "mpirun_exited": ("job running", "#a1d99b"), "result_published": ("result out", "#fdae6b"),
          "result_received": ("job running (worker)", "#c7e9c0"), "acked": ("acks", "#e6550d"),
          "exited": ("exit", "#636363"), "rank": ("rank running", "#31a354"),
          "rank_failed": ("rank running, then failed or stopped", "#fb6a4a")}


def render_png(data: dict, out: Path) -> Path:
    """A per-host Gantt chart: one row per host (its entrypoint's phases), one thin row per rank.

    Raises:
        SpecError: matplotlib is not installed (it is the optional extra ``mpirun_kit[timeline]``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SpecError("rendering a timeline chart needs matplotlib, which is not installed: "
                        "pip install 'mpirun_kit[timeline]' (or leave out --png)") from exc
    path = critical_path(data)
    t0 = path[0].t if path else 0.0
    rows: list[tuple[str, list[tuple[float, float, str]]]] = []
    for h, v in data["hosts"].items():
        spans = []
        recs = v["phases"]
        for a, b in zip(recs, recs[1:]):
            spans.append((a["t"] - t0, b["t"] - a["t"], b["phase"]))
        rows.append((f"{h} ({v['role']})", spans))
        for r in data["ranks"]:
            if r["host"] == h and "started" in r:
                end = r.get("exited", path[-1].t if path else r["started"])
                kind = "rank_failed" if failed_rank(r) else "rank"
                rows.append((f"  rank {r['rank']}", [(r["started"] - t0, end - r["started"], kind)]))
    fig, ax = plt.subplots(figsize=(11, 0.3 * len(rows) + 1.6))
    seen: set[str] = set()
    for i, (_, spans) in enumerate(rows):
        y = len(rows) - 1 - i
        for start, width, phase in spans:
            label, colour = _SPANS.get(phase, (phase, "#bbbbbb"))
            ax.barh(y, max(width, 0.002), left=start, color=colour, edgecolor="none",
                    height=0.8 if not phase.startswith("rank") else 0.5, label=None if label in seen else label)
            seen.add(label)
            if phase == "rank_failed":      # a stop mark where the rank ended badly
                ax.plot(start + width, y, marker="X", color="#cb181d", markersize=7,
                        label=None if "rank ended badly" in seen else "rank ended badly")
                seen.add("rank ended badly")
    hang = data.get("hang")
    if hang:
        x = hang["detected_at"] - t0
        exiting = hang.get("kind") == "exit"
        ax.axvline(x, color="#cb181d", linestyle="--", linewidth=1.2,
                   label="rank exiting alone reported" if exiting else "hang reported")
        names = [name for name, _ in rows]
        for r in hang.get("ranks", []):
            if r.get("suspect") and f"  rank {r.get('rank')}" in names:
                y = len(rows) - 1 - names.index(f"  rank {r.get('rank')}")
                ax.annotate(f"{r.get('where') or r.get('state')}"[:60], (x, y), xytext=(4, 0),
                            textcoords="offset points", fontsize=6, color="#cb181d", va="center")
    ax.set_yticks(range(len(rows)), [name for name, _ in reversed(rows)], fontsize=7)
    ax.set_xlabel("seconds since the first entrypoint started")
    ending = outcome_line(data)
    ax.set_title(("FAILED: " + ending + "\n" if data.get("exit_code") else
                  ending.upper() + "\n" if ending else "") + summary_line(data), fontsize=8,
                 color="#cb181d" if ending else "black")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
