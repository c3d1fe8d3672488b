"""Hung-rank detection on the master: per-rank progress, the stall policy, the hang report.

Data flow: ranks' ``progress`` reports (mpirun_kit.progress -> rank wrapper -> result
channel) land in ``HangWatch.progress``; the master's ``HangMonitor`` thread asks the
watch every ``TICK_S`` whether the job is stalled:

* no rank advanced for ``timeouts.stall_s``, or
* one rank's last advance is ``stall_s`` older than the others' and its step is lower than
  some other rank's (it fell behind; a rank that never reported while others did counts
  from the first report of any rank).  A rank that is ahead, or done and waiting for the
  others (in MPI_Finalize, say), is not behind; once any rank has exited, ranks at the
  highest step reached are done, and are not judged at all.

Only ranks that report progress are judged, and only once any rank has reported: a
program that never calls ``progress.step`` is never reported.  A rank that advances,
however slowly, within ``stall_s`` is never reported.

On a stall the monitor asks every rank on the affected hosts for its Python stacks
(the wrapper runs py-spy, observe/relay.py), waits at most ``STACKS_WAIT_S``, and writes
one report (host, rank, last step, how long, frames innermost first, and the suspects:
the stalled ranks, or, when all stalled, the ranks whose innermost frame differs from
the majority's) to the log and ``<opt_ml>/output/hang-report.txt`` (atomically).  One
report per stall; progress re-arms it.  With ``timeouts.hang_abort_s`` set, a stall
that outlasts its report by that long stops mpirun and the job exits ``ExitCode.HUNG``.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, TextIO

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..core.files import write_atomic

log = logging.getLogger(__name__)

#: how often the monitor looks at the table.
TICK_S = 0.5
#: how long the monitor waits for stack replies before it writes the report without them.
STACKS_WAIT_S = 4.0
#: frames shown per thread in the report.
REPORT_FRAMES = 12
#: how often the master logs each host's progress (``progress_lines``; the SageMaker target's metric
#: definitions read these lines into per-host metrics).
PROGRESS_LOG_S = 30.0


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def escape(text: str) -> str:
    """Text from a rank (frame, file and thread names come from the program) made safe for one report line:
    control characters (a newline would forge a report line, an escape sequence would drive the reader's
    terminal) and backslashes are written as Python escapes."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else repr(c)[1:-1] if c != "\\" else "\\\\" for c in text)


def check_observe_report(msg: dict, rank_hosts: Mapping[int, str]) -> tuple[dict | None, str]:
    """A rank's progress or stacks message reduced to known fields, or (None, why).

    Called by the result channel for ``event`` "progress" and "stacks" after the MAC
    and the rank/host placement were checked.
    """
    rank, event = msg.get("rank"), msg.get("event")
    if event == "progress":
        step = msg.get("step")
        if not _is_int(step) or not 0 <= step < 2 ** 63:
            return None, f"progress step {repr(step)[:40]} is not a non-negative integer"
        return {"event": "progress", "rank": rank, "host": rank_hosts[rank], "step": step}, ""
    if event == "stacks":
        threads, how = msg.get("threads"), msg.get("how", "")
        clean = []
        if not isinstance(threads, list) or not isinstance(how, str):
            return None, "a stacks report needs a list 'threads' and a text 'how'"
        for th in threads[:64]:
            if not isinstance(th, dict) or not isinstance(th.get("frames"), list):
                return None, "a stacks thread needs a list 'frames'"
            frames = []
            for f in th["frames"][:64]:
                if not (isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("file"), str)
                        and _is_int(f.get("line"))):
                    return None, "a stack frame needs a text name and file and an integer line"
                frames.append({"name": f["name"][:120], "file": f["file"][-200:], "line": f["line"]})
            clean.append({"thread": str(th.get("thread", "?"))[:80], "frames": frames})
        return {"event": "stacks", "rank": rank, "host": rank_hosts[rank], "threads": clean, "how": how[:300]}, ""
    return None, f"unknown rank event {str(event)[:40]!r}"


@dataclass
class RankProgress:
    step: int | None
    advanced: float          # monotonic time of the last advance (or of the first report of any rank)


@dataclass(frozen=True)
class Stall:
    """A stall the watch found: ``ranks`` stalled (rank -> seconds since it advanced); ``all``: every rank."""

    ranks: Mapping[int, float]
    all: bool


@dataclass
class HangWatch:
    """Per-rank last step and last advance; ``check`` applies the stall policy."""

    rank_hosts: Mapping[int, str]
    stall_s: float
    clock: Clock = SYSTEM_CLOCK
    table: dict[int, RankProgress] = field(default_factory=dict)
    reported: bool = False
    gone: set[int] = field(default_factory=set)
    top: int = -1                 # the highest step any rank reported (exited ones included)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def progress(self, rank: int, step: int) -> None:
        now = self.clock.monotonic()
        with self._lock:
            if not self.table and not self.gone:
                # The first report starts every rank's clock: a rank that never reports is judged from here.
                self.table = {r: RankProgress(None, now) for r in self.rank_hosts}
            p = self.table.get(rank)
            if p is None:
                return
            if p.step is None or step > p.step:
                p.step, p.advanced = step, now
                self.top = max(self.top, step)
                self.reported = False       # progress re-arms the report

    def exited(self, rank: int) -> None:
        """A rank that ended is judged no more (the others may go on without it)."""
        with self._lock:
            self.table.pop(rank, None)
            self.gone.add(rank)

    def snapshot(self) -> dict[int, RankProgress]:
        with self._lock:
            return {r: RankProgress(p.step, p.advanced) for r, p in self.table.items()}

    def check(self) -> Stall | None:
        """The current stall, or None (also None while one is already reported and nothing advanced)."""
        now = self.clock.monotonic()
        with self._lock:
            if not self.table or self.reported:
                return None
            # Once a rank has ended, the job is ending: ranks at the highest step any rank reached are
            # done and wait for the rest (in MPI_Finalize, say); only ranks below it are judged.
            judged = {r: p for r, p in self.table.items()
                      if not (self.gone and p.step is not None and p.step >= self.top)}
            if not judged:
                return None
            idle = {r: now - p.advanced for r, p in judged.items()}
            steps = {r: -1 if p.step is None else p.step for r, p in self.table.items()}
        if min(idle.values()) >= self.stall_s:
            return Stall(idle, True)
        # Behind: idle stall_s longer than the freshest rank, and at a lower step than some rank.  A rank
        # that is ahead or done (waiting in MPI_Finalize for a slower one) is not behind.
        behind = {r: s for r, s in idle.items() if s >= self.stall_s + min(idle.values()) and steps[r] < self.top}
        return Stall(behind, False) if behind else None


def progress_lines(table: Mapping[int, RankProgress], rank_hosts: Mapping[int, str]) -> list[str]:
    """The master's progress lines: one per host whose ranks reported a step (the host's lowest step: its
    slowest rank), then the job's lowest and highest step.  Empty while no rank reported a step."""
    per_host: dict[str, int] = {}
    steps = [p.step for p in table.values() if p.step is not None]
    for r, p in table.items():
        if p.step is not None:
            h = rank_hosts[r]
            per_host[h] = min(per_host.get(h, p.step), p.step)
    if not per_host:
        return []
    lines = [f"mpirun_kit: progress host={h} step={s}" for h, s in sorted(per_host.items())]
    lines.append(f"mpirun_kit: progress job min_step={min(steps)} max_step={max(steps)}")
    return lines


def _signature(threads: list[dict]) -> tuple:
    """Where a rank waits: the innermost frame of its first thread (the main thread in py-spy's order)."""
    for th in threads:
        if th["frames"]:
            f = th["frames"][0]
            return f["name"], f["file"], f["line"]
    return ()


def suspects(stall: Stall, stacks: Mapping[int, dict]) -> list[int]:
    """The ranks to blame: those behind, or, when all stalled, those waiting where the majority does not."""
    if not stall.all:
        return sorted(stall.ranks)
    sigs = {r: _signature(s["threads"]) for r, s in stacks.items() if s.get("threads")}
    if len(sigs) < 2:
        return []
    counts = collections.Counter(sigs.values())
    (top, n), = counts.most_common(1)
    if n == 1 or list(counts.values()).count(n) > 1:   # no clear majority: blame nobody
        return []
    return sorted(r for r, sig in sigs.items() if sig != top)


def render_report(stall: Stall, table: Mapping[int, RankProgress], stacks: Mapping[int, dict],
                  rank_hosts: Mapping[int, str], stall_s: float, when: float, now_mono: float,
                  hang_abort_s: float | None) -> str:
    blamed = suspects(stall, stacks)
    head = ("no rank advanced for {:.1f} s".format(min(stall.ranks.values())) if stall.all else
            ", ".join(f"rank {r} on {rank_hosts[r]} is {s:.1f} s behind the others" for r, s in sorted(stall.ranks.items())))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
    lines = [f"mpirun_kit: hang detected at {stamp}: {head} (timeouts.stall_s = {stall_s:g} s)"]
    if blamed:
        lines.append("suspect: " + ", ".join(f"rank {r} on {rank_hosts[r]}" for r in blamed)
                     + (" (waiting where the other ranks are not)" if stall.all else ""))
    else:
        lines.append("suspect: none singled out (every rank waits in the same place, or no stacks came back)")
    lines.append("then: " + (f"the job is stopped with exit code 76 (hung) if no rank advances within "
                             f"{hang_abort_s:g} s (timeouts.hang_abort_s)" if hang_abort_s is not None
                             else "the job keeps running (set timeouts.hang_abort_s to stop hung jobs)"))
    order = blamed + [r for r in sorted(rank_hosts) if r not in blamed]
    for r in order:
        p = table.get(r)
        if r not in stacks and r not in stall.ranks:
            continue
        last = "never reported a step" if p is None or p.step is None else f"last step {p.step}"
        ago = f"{now_mono - p.advanced:.1f} s ago" if p is not None else ""
        lines.append(f"{'*' if r in blamed else ' '} rank {r} on {rank_hosts[r]}: {last}, {ago}".rstrip(", "))
        s = stacks.get(r)
        if s is None:
            lines.append("      (no stacks: the rank did not answer in time)")
            continue
        if not s["threads"]:
            lines.append(f"      (no stacks: {escape(s['how'])})")
            continue
        for th in s["threads"]:
            if not th["frames"]:
                continue
            lines.append(f"    thread {escape(th['thread'])} ({escape(s['how'])}), innermost first:")
            for f in th["frames"][:REPORT_FRAMES]:
                lines.append(f"      {escape(f['name'])} ({escape(f['file'])}:{f['line']})")
    return "\n".join(lines) + "\n"


def write_report(opt_ml: Path, text: str) -> Path | None:
    """``<opt_ml>/output/hang-report.txt``, written atomically; None (logged) when it cannot be written."""
    path = Path(opt_ml) / "output" / "hang-report.txt"
    try:
        return write_atomic(path, text, 0o600)
    except OSError as exc:
        log.warning("could not write the hang report %s: %s", path, exc)
        return None


class HangMonitor:
    """The master's thread: watch, collect stacks, report, and (with hang_abort_s) ask for the abort.

    Args:
        request_stacks: sends the stacks request to these ranks; returns the ranks it reached.
    """

    def __init__(self, rank_hosts: Mapping[int, str], stall_s: float, hang_abort_s: float | None, opt_ml: Path,
                 request_stacks: Callable[[Iterable[int]], Iterable[int]], *, clock: Clock = SYSTEM_CLOCK,
                 out: TextIO | None = None, progress_to_out: bool = True):
        """``out``: the master's log stream (hang reports, and progress lines when ``progress_to_out``;
        otherwise those go to the log at INFO, shown at -v: a plain ``submit`` prints none)."""
        self.rank_hosts = dict(rank_hosts)
        self.progress_to_out = progress_to_out
        self.watch = HangWatch(self.rank_hosts, stall_s, clock)
        self.stall_s, self.hang_abort_s, self.opt_ml = stall_s, hang_abort_s, opt_ml
        self.request_stacks, self.clock, self.out = request_stacks, clock, out
        self._cv = threading.Condition()
        self._stacks: dict[int, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="mpirun_kit-hang-monitor")
        self.reports: list[str] = []
        self.report_path: Path | None = None
        self._reported_at: float | None = None
        self._abort = threading.Event()
        self._last_progress: list[str] = []

    # -- fed by the result channel's thread ------------------------------------------
    def on_report(self, msg: dict) -> None:
        if msg["event"] == "progress":
            self.watch.progress(msg["rank"], msg["step"])
        elif msg["event"] == "exit":
            self.watch.exited(msg["rank"])
        elif msg["event"] == "stacks":
            with self._cv:
                self._stacks[msg["rank"]] = msg
                self._cv.notify_all()

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> "HangMonitor":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=STACKS_WAIT_S + 1)

    def hung(self) -> bool:
        """True once hang_abort_s ran out after a report: the master stops mpirun."""
        return self._abort.is_set()

    def last_report(self) -> str:
        return self.reports[-1] if self.reports else ""

    def _log_progress(self) -> None:
        lines = progress_lines(self.watch.snapshot(), self.rank_hosts)
        if lines and lines != self._last_progress:
            self._last_progress = lines
            if self.out is not None and self.progress_to_out:    # the master's log stream
                print("\n".join(lines), file=self.out, flush=True)
            else:
                for line in lines:
                    log.info("%s", line.removeprefix("mpirun_kit: "))

    def _run(self) -> None:
        next_progress = self.clock.monotonic() + PROGRESS_LOG_S
        while not self._stop.wait(TICK_S):
            if self.clock.monotonic() >= next_progress:
                next_progress = self.clock.monotonic() + PROGRESS_LOG_S
                self._log_progress()
            stall = self.watch.check()
            if stall is not None:
                self._report(stall)
            elif self.hang_abort_s is not None and self._reported_at is not None and self.watch.reported:
                if self.clock.monotonic() - self._reported_at >= self.hang_abort_s and not self._abort.is_set():
                    log.error("no rank advanced within timeouts.hang_abort_s = %g s of the hang report: "
                              "stopping the job (exit code 76, hung)", self.hang_abort_s)
                    self._abort.set()

    def _report(self, stall: Stall) -> None:
        hosts = {self.rank_hosts[r] for r in stall.ranks}
        ranks = sorted(r for r, h in self.rank_hosts.items() if h in hosts)
        with self._cv:
            self._stacks.clear()
        asked = set(self.request_stacks(ranks))
        deadline = Deadline(self.clock, STACKS_WAIT_S)
        with self._cv:
            while not asked <= set(self._stacks) and deadline.remaining() > 0:
                self._cv.wait(min(deadline.remaining(), 0.2))
            stacks = dict(self._stacks)
        text = render_report(stall, self.watch.snapshot(), stacks, self.rank_hosts, self.stall_s,
                             self.clock.time(), self.clock.monotonic(), self.hang_abort_s)
        self.watch.reported = True
        self._reported_at = self.clock.monotonic()
        self.reports.append(text)
        self.report_path = write_report(self.opt_ml, text)
        where = f"mpirun_kit: hang report written to {self.report_path}" if self.report_path else ""
        if self.out is not None:   # the master's log stream
            print(text + where, file=self.out, flush=True)
        else:
            log.error("%s%s", text.removeprefix("mpirun_kit: "), where)
