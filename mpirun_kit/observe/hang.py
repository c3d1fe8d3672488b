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

A program that never calls ``progress.step`` is judged from outside: each rank's wrapper watches
its program (observe/relay.py ``Sampler``) and, while the program reports nothing and does no I/O,
samples its stacks at a low rate and sends how long nothing changed (``quiet_s``: no step, no I/O,
the same stack signature) with where its main thread waits.  The job is stalled when every live
rank's last sample says ``quiet_s >= stall_s``.  A rank that advances, however slowly, within
``stall_s`` is never reported (a new step, a byte of I/O or a new signature is a change).

A rank whose program called exit and sits in ``MPI_Finalize`` (its sample's frames say so) while
every other live rank has been quiet for ``stall_s`` can never finish: the monitor asks its wrapper
to let the exit go on (``{"type": "finish"}``; gdb pops the finalize frame, observe/stacks.py), so the
rank ends with its own exit code and the job fails with it, as a rank failing alone does.  Where
that cannot be done (no gdb) the job is stopped and ends with the code the stacks showed.  A rank
that ended with 0 there is a hang's suspect instead.

On a stall the monitor asks every rank on the affected hosts for its Python stacks
(the wrapper runs py-spy, observe/relay.py), waits at most ``STACKS_WAIT_S``, and writes
one report (host, rank, last step, how long, frames innermost first, and the suspects with why
each was chosen: the ranks behind, or, when all stalled, the odd ones out by where they wait:
gone, exiting in finalize, outside a collective, in another collective or call site; ``odd_ones``)
to the log and ``<opt_ml>/output/hang-report.txt`` (atomically).  One
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
from .stacks import classify, telling_frames, where

log = logging.getLogger(__name__)

#: how often the monitor looks at the table.
TICK_S = 0.5
#: how long the monitor waits for stack replies before it writes the report without them.
STACKS_WAIT_S = 4.0
#: frames shown per thread in the report.
REPORT_FRAMES = 12
#: after the finish request, how long the rank's exit may take to end the job before the master stops it.
FINISH_GRACE_S = 30.0
#: how many frames of each rank, and ranks besides the suspects, the hang's JSON (the result's ``hang``, the
#: timeline) carries.
JSON_FRAMES, JSON_RANKS = 5, 16

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
    if event == "sample":
        quiet, sig, how, frames = msg.get("quiet_s"), msg.get("sig"), msg.get("how"), msg.get("frames")
        if not (isinstance(quiet, (int, float)) and not isinstance(quiet, bool) and 0 <= quiet < 1e9):
            return None, f"sample quiet_s {repr(quiet)[:40]} is not a non-negative number"
        if not isinstance(sig, str) or not isinstance(how, str) or not isinstance(frames, list):
            return None, "a sample needs a text 'sig' and 'how' and a list 'frames'"
        clean_frames, why = _clean_frames(frames[:16])
        if clean_frames is None:
            return None, why
        return {"event": "sample", "rank": rank, "host": rank_hosts[rank], "quiet_s": float(quiet),
                "sig": sig[:32], "how": how[:300], "frames": clean_frames}, ""
    if event == "finish":
        code = msg.get("code")
        if code is not None and not (_is_int(code) and 0 <= code <= 255):
            return None, f"finish code {repr(code)[:40]} is not an integer 0-255"
        return {"event": "finish", "rank": rank, "host": rank_hosts[rank], "found": msg.get("found") is True,
                "returned": msg.get("returned") is True, "code": code, "why": str(msg.get("why", ""))[:300]}, ""
    return None, f"unknown rank event {str(event)[:40]!r}"


def _clean_frames(frames: list) -> tuple[list[dict] | None, str]:
    out = []
    for f in frames:
        if not (isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("file"), str)
                and _is_int(f.get("line"))):
            return None, "a stack frame needs a text name and file and an integer line"
        out.append({"name": f["name"][:120], "file": f["file"][-200:], "line": f["line"]})
    return out, ""


@dataclass
class RankSample:
    """A rank's last sample as the master got it: quiet_s (the wrapper's: no step, no I/O, the same
    signature), its main thread's frames and what they say (``stacks.classify``)."""

    quiet_s: float
    frames: list[dict]
    how: str
    at: float                 # the master's monotonic time it arrived
    state: str = "unknown"
    call: str = ""


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
    samples: dict[int, RankSample] = field(default_factory=dict)
    exits: dict[int, str] = field(default_factory=dict)     # rank -> how it ended ("exited with code 3")
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sample(self, rank: int, quiet_s: float, frames: list[dict], how: str) -> None:
        """A rank's sample: where it waits and how long nothing changed; a rank seen to change re-arms the
        report of a stall judged from samples."""
        state, call = classify(frames) if frames else (("active", "") if how == "activity" else ("unknown", ""))
        with self._lock:
            if rank in self.gone:
                return                      # a sample that crossed its rank's exit report
            old = self.samples.get(rank)
            self.samples[rank] = RankSample(quiet_s, frames, how, self.clock.monotonic(), state, call)
            if not self.table and old is not None and quiet_s < self.stall_s <= old.quiet_s:
                self.reported = False       # it changed within stall_s after the report: a new stall may follow

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

    def exited(self, rank: int, how: str = "") -> None:
        """A rank that ended is judged no more (the others may go on without it)."""
        with self._lock:
            self.table.pop(rank, None)
            self.samples.pop(rank, None)
            self.gone.add(rank)
            self.exits[rank] = how

    def sample_snapshot(self) -> dict[int, RankSample]:
        with self._lock:
            return dict(self.samples)

    def exiting_alone(self) -> list[int]:
        """Ranks that called exit and have sat in MPI_Finalize for stall_s while every other live rank has
        waited in MPI as long (a collective, a point-to-point wait, finalize): such a rank can never finish.
        A rank that computes (its stack outside MPI), however long unchanged, may still come to finalize:
        then nobody is ended."""
        with self._lock:
            live = [r for r in self.rank_hosts if r not in self.gone]
            quiet = {r: s for r, s in self.samples.items() if s.quiet_s >= self.stall_s}
        exiting = [r for r, s in quiet.items() if s.state == "finalize" and s.call == "exit"]
        others = [r for r in live if r not in exiting]
        if not exiting or not others or not all(
                r in quiet and quiet[r].state in ("collective", "p2p", "finalize") for r in others):
            return []
        return sorted(exiting)

    def snapshot(self) -> dict[int, RankProgress]:
        with self._lock:
            return {r: RankProgress(p.step, p.advanced) for r, p in self.table.items()}

    def check(self) -> Stall | None:
        """The current stall, or None (also None while one is already reported and nothing advanced)."""
        now = self.clock.monotonic()
        with self._lock:
            if self.reported:
                return None
            if not self.table:
                # No rank reports progress: judged from the wrappers' samples.  Stalled when every live rank's
                # last sample says nothing changed for stall_s.
                live = [r for r in self.rank_hosts if r not in self.gone]
                quiet = {r: self.samples[r].quiet_s for r in live if r in self.samples}
                if live and len(quiet) == len(live) and min(quiet.values()) >= self.stall_s:
                    return Stall(quiet, True)
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


def _main_frames(stack: dict | None) -> list[dict]:
    """The frames of a stacks reply's first thread with frames (the main thread: the wrapper sends it first)."""
    for th in (stack or {}).get("threads", ()):
        if th["frames"]:
            return th["frames"]
    return []


@dataclass(frozen=True)
class Place:
    """Where one rank waits, as the report compares it: ``state``/``call`` from ``stacks.classify``, ``site``
    the innermost frame with a source line (``stacks.where``)."""

    state: str
    call: str
    site: str

    def words(self) -> str:
        if self.state == "finalize":
            return ("called exit and waits in MPI_Finalize" if self.call == "exit" else "waits in MPI_Finalize") \
                + f" (at {self.site})"
        if self.state in ("collective", "p2p"):
            return f"waits in {self.call} ({self.site})"
        return f"waits in {self.site}"


def places(stacks: Mapping[int, dict], samples: Mapping[int, RankSample] | None = None) -> dict[int, Place]:
    """Each rank's Place, from its stacks reply, else from its last sample's frames."""
    out = {}
    for r in set(stacks) | set(samples or {}):
        frames = _main_frames(stacks.get(r)) or ((samples or {}).get(r).frames if r in (samples or {}) else [])
        if frames:
            state, call = classify(frames)
            out[r] = Place(state, call, where(frames))
    return out


def _ranks_text(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks[:8])) + (
        f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def _wait(ranks) -> str:
    return "waits" if len(list(ranks)) == 1 else "wait"


def _by_majority(groups: dict[str, list[int]], what: str) -> list[tuple[int, str]]:
    """The ranks outside the one largest group, each with why; at a tie (2 ranks in two places, say) every rank
    is named, since nothing says which side is odd."""
    if len(groups) < 2:
        return []
    order = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    (top, top_ranks), (_, second) = order[0], order[1]
    if len(top_ranks) == len(second):
        listing = "; ".join(f"{_ranks_text(rs)} in {k}" for k, rs in order)
        return sorted((r, f"the ranks wait in different {what}s ({listing}), with no majority")
                      for k, rs in order for r in rs)
    return sorted((r, f"in {k} while {_ranks_text(top_ranks)} {_wait(top_ranks)} in {top}")
                  for k, rs in order[1:] for r in rs)


def odd_ones(at: Mapping[int, Place], gone: Mapping[int, str] = {}) -> list[tuple[int, str]]:
    """The suspects of a stall where every rank waits, each with why, by comparing where the ranks wait:

    1. a rank whose process is gone while others wait;
    2. a rank in MPI_Finalize (it called exit, or finished) while others wait elsewhere;
    3. a rank outside any collective while others wait in one;
    4. a rank in another collective than the others', then at another call site.
    """
    out: list[tuple[int, str]] = []
    waiting = [r for r in at if r not in gone]
    if gone and waiting:
        out += [(r, f"its process is gone ({how or 'it exited'}) while {_ranks_text(waiting)} {_wait(waiting)}")
                for r, how in sorted(gone.items())]
    fin = [r for r in waiting if at[r].state == "finalize"]
    rest = [r for r in waiting if r not in fin]
    if fin and rest:
        calls = sorted({at[r].call for r in rest if at[r].state in ("collective", "p2p")})
        elsewhere = f"in {', '.join(calls)}" if calls else "elsewhere"
        return out + [(r, f"{at[r].words()} while {_ranks_text(rest)} {_wait(rest)} {elsewhere}") for r in fin]
    if out:
        return out
    coll = [r for r in rest if at[r].state in ("collective", "p2p")]
    other = [r for r in rest if r not in coll]
    if coll and other:
        calls = sorted({at[r].call for r in coll})
        return [(r, f"not in a collective: {at[r].words()} while {_ranks_text(coll)} {_wait(coll)} in "
                    f"{', '.join(calls)}")
                for r in sorted(other)]
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for r in rest:
        groups[at[r].call if coll else at[r].site].append(r)
    if len(groups) > 1:
        return _by_majority(dict(groups), "collective" if coll else "place")
    sites: dict[str, list[int]] = collections.defaultdict(list)
    for r in rest:
        sites[at[r].site].append(r)
    return _by_majority(dict(sites), "call site")


def suspects(stall: Stall, stacks: Mapping[int, dict], samples: Mapping[int, RankSample] | None = None,
             gone: Mapping[int, str] = {}) -> list[int]:
    """The ranks to blame: those behind, or, when all stalled, the odd ones out (``odd_ones``)."""
    return [r for r, _ in blame(stall, stacks, samples, gone)]


def blame(stall: Stall, stacks: Mapping[int, dict], samples: Mapping[int, RankSample] | None = None,
          gone: Mapping[int, str] = {}) -> list[tuple[int, str]]:
    """(rank, why) for each suspect of ``stall``."""
    if not stall.all:
        return [(r, f"{s:.1f} s behind the others (it reports progress, they advanced)")
                for r, s in sorted(stall.ranks.items())]
    return odd_ones(places(stacks, samples), gone)


def render_report(stall: Stall, table: Mapping[int, RankProgress], stacks: Mapping[int, dict],
                  rank_hosts: Mapping[int, str], stall_s: float, when: float, now_mono: float,
                  hang_abort_s: float | None, samples: Mapping[int, RankSample] | None = None,
                  gone: Mapping[int, str] = {}, head: str = "", exiting: bool = False) -> str:
    """The hang report: what stalled, the suspects with why, what happens next, then every rank's frames.
    ``exiting``: the report of a rank that exits alone (a failure: its exit goes on), not of a hang."""
    samples = samples or {}
    why = dict(blame(stall, stacks, samples, gone))
    blamed = sorted(why)
    if not head:
        head = ("no rank advanced for {:.1f} s".format(min(stall.ranks.values())) if stall.all and table else
                "no rank changed for {:.1f} s (no progress report, no I/O, the same stacks)".format(
                    min(stall.ranks.values())) if stall.all else
                ", ".join(f"rank {r} on {rank_hosts[r]} is {s:.1f} s behind the others"
                          for r, s in sorted(stall.ranks.items())))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
    title = "a rank exits alone, detected at" if exiting else "hang detected at"
    lines = [f"mpirun_kit: {title} {stamp}: {head} (timeouts.stall_s = {stall_s:g} s)"]
    for r in blamed:
        lines.append(f"suspect: rank {r} on {rank_hosts[r]}: {escape(why[r])}")
    if not blamed:
        lines.append("suspect: none singled out (every rank waits in the same place, or no stacks came back)")
    lines.append("then: " + ("its exit goes on (its wrapper pops MPI_Finalize with gdb), so it ends with its own "
                             "exit code and the job fails with it" if exiting else
                             f"the job is stopped with exit code 76 (hung) if no rank advances within "
                             f"{hang_abort_s:g} s (timeouts.hang_abort_s)" if hang_abort_s is not None
                             else "the job keeps running (timeouts.hang_abort_s is 0: hung jobs are not stopped)"))
    order = blamed + [r for r in sorted(rank_hosts) if r not in blamed]
    for r in order:
        p, smp = table.get(r), samples.get(r)
        if r not in stacks and r not in stall.ranks and r not in gone:
            continue
        if r in gone:
            last = f"gone ({gone[r] or 'exited'})"
        elif p is not None and p.step is not None:
            last = f"last step {p.step}, {now_mono - p.advanced:.1f} s ago"
        elif p is not None:
            last = f"never reported a step, {now_mono - p.advanced:.1f} s ago"
        elif smp is not None:
            last = f"no change for {smp.quiet_s:.1f} s"
        else:
            last = "no progress report"
        lines.append(f"{'*' if r in blamed else ' '} rank {r} on {rank_hosts[r]}: {last}")
        s = stacks.get(r)
        if s is None and smp is not None and smp.frames:
            s = {"threads": [{"thread": "main", "frames": smp.frames}], "how": smp.how + ", last sample"}
        if s is None:
            if r not in gone:
                lines.append("      (no stacks: the rank did not answer in time)")
            continue
        if not s["threads"]:
            lines.append(f"      (no stacks: {escape(s['how'])})")
            continue
        for th in s["threads"]:
            if not th["frames"]:
                continue
            shown = telling_frames(th["frames"])
            left = len(th["frames"]) - len(shown)
            hidden = f", {left} native frames left out" if left else ""
            lines.append(f"    thread {escape(th['thread'])} ({escape(s['how'])}{hidden}), innermost first:")
            for f in shown[:REPORT_FRAMES]:
                lines.append(f"      {escape(f['name'])} ({escape(f['file'])}:{f['line']})")
    return "\n".join(lines) + "\n"


def hang_json(stall: Stall, stacks: Mapping[int, dict], samples: Mapping[int, RankSample],
              rank_hosts: Mapping[int, str], gone: Mapping[int, str], stall_s: float, when: float,
              kind: str, report: Path | None) -> dict:
    """The stall as data: the result's ``hang`` (``--json``) and the timeline's (observe/timeline.py)."""
    why = dict(blame(stall, stacks, samples, gone))
    at = places(stacks, samples)
    ranks = []
    # Bounded (the result travels to every worker in one channel line): the suspects, then up to JSON_RANKS others.
    listed = sorted(why) + sorted((set(stall.ranks) | set(at)) - set(why))[:JSON_RANKS]
    for r in sorted(listed):
        frames = _main_frames(stacks.get(r)) or (samples[r].frames if r in samples else [])
        p = at.get(r)
        ranks.append({"rank": r, "host": rank_hosts[r], "idle_s": round(stall.ranks[r], 1) if r in stall.ranks
                      else None, "state": p.state if p else ("gone" if r in gone else "unknown"),
                      "call": p.call if p else "", "where": p.site[:200] if p else "",
                      "frames": [f"{f['name']} ({f['file']}:{f['line']})"[:200]
                                 for f in telling_frames(frames)[:JSON_FRAMES]],
                      "suspect": r in why, "why": why.get(r, "")[:300]})
    return {"kind": kind, "detected_at": when, "stall_s": stall_s, "suspects": sorted(why),
            "ranks": ranks, "report": str(report) if report else None}


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
                 out: TextIO | None = None, progress_to_out: bool = True,
                 send: Callable[[Iterable[int], dict], Iterable[int]] | None = None):
        """``out``: the master's log stream (hang reports, and progress lines when ``progress_to_out``;
        otherwise those go to the log at INFO, shown at -v: a plain ``submit`` prints none).
        ``send(ranks, msg)``: a message to ranks' wrappers (the "watch" that starts their sampling, a
        "finish"); None: no sampling (only ranks that report progress are judged)."""
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
        self.send = send
        #: the last stall as data (``hang_json``): the result's ``hang`` and the timeline's marks.
        self.hang: dict | None = None
        self._finish_sent: dict[int, float] = {}       # rank -> when its finish was asked (monotonic)
        self._finish_replies: dict[int, dict] = {}
        #: a rank that called exit could not be let out of MPI_Finalize: {rank, host, code, why}; the master
        #: stops the job and ends with its code (``exit_failure``).
        self._exit_failure: dict | None = None

    # -- fed by the result channel's thread ------------------------------------------
    def on_report(self, msg: dict) -> None:
        if msg["event"] == "progress":
            self.watch.progress(msg["rank"], msg["step"])
        elif msg["event"] == "start" and self.send is not None:
            # The rank's wrapper starts watching its program from outside (observe/relay.py Sampler).
            self.send([msg["rank"]], {"type": "watch", "stall_s": self.stall_s})
        elif msg["event"] == "sample":
            self.watch.sample(msg["rank"], msg["quiet_s"], msg["frames"], msg["how"])
        elif msg["event"] == "finish":
            with self._cv:
                self._finish_replies[msg["rank"]] = msg
        elif msg["event"] == "exit":
            self.watch.exited(msg["rank"], f"killed by {msg['signal']}" if msg.get("signal")
                              else f"exited with code {msg.get('exit_code')}")
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

    def stop_asked(self) -> bool:
        """True when the master must stop mpirun: hang_abort_s ran out, or a rank's exit could not be let
        out of MPI_Finalize (``exit_failure``)."""
        return self._abort.is_set() or self._exit_failure is not None

    def exit_failure(self) -> dict | None:
        """{rank, host, code (None: unknown), why} of a rank that called exit, sat in MPI_Finalize while the
        others waited, and could not be let out: the job ends with its code."""
        return self._exit_failure

    def exit_note(self) -> str:
        """One line on the ranks this monitor let out of MPI_Finalize (empty when none): the job's reason."""
        if not self._finish_sent:
            return ""
        ranks = sorted(self._finish_sent)
        return (f"{', '.join(f'rank {r} on {self.rank_hosts[r]}' for r in ranks)} called exit and waited in "
                f"MPI_Finalize for timeouts.stall_s = {self.stall_s:g} s while the other ranks waited for it; "
                "mpirun_kit let its exit go on (see the hang report)")

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
            if self.send is not None:
                self._check_exits()
            stall = self.watch.check()
            if stall is not None:
                self._report(stall)
            elif self.hang_abort_s is not None and self._reported_at is not None and self.watch.reported:
                if self.clock.monotonic() - self._reported_at >= self.hang_abort_s and not self._abort.is_set():
                    log.error("no rank advanced within timeouts.hang_abort_s = %g s of the hang report: "
                              "stopping the job (exit code 76, hung)", self.hang_abort_s)
                    self._abort.set()

    def _check_exits(self) -> None:
        """A rank that called exit and waits in MPI_Finalize while the others wait: a failure, not a hang."""
        now = self.clock.monotonic()
        new = [r for r in self.watch.exiting_alone() if r not in self._finish_sent]
        if new:
            samples = self.watch.sample_snapshot()
            gone = {r: h for r, h in self.watch.exits.items()}
            stall = Stall({r: s.quiet_s for r, s in samples.items()}, True)
            others = [r for r in samples if r not in new]
            head = (", ".join(f"rank {r} on {self.rank_hosts[r]} called exit and has waited in MPI_Finalize for "
                              f"{samples[r].quiet_s:.1f} s" for r in new)
                    + f" while {_ranks_text(others)} {_wait(others)} for it")
            self._publish(render_report(stall, self.watch.snapshot(), {}, self.rank_hosts, self.stall_s,
                                        self.clock.time(), now, self.hang_abort_s, samples, gone, head=head,
                                        exiting=True),
                          stall, {}, samples, gone, "exit")
            for r in new:
                self._finish_sent[r] = now
            if self.send is not None:
                self.send(new, {"type": "finish"})
        if self._exit_failure is not None:
            return
        with self._cv:
            replies = dict(self._finish_replies)
        for r, sent in self._finish_sent.items():
            if r in self.watch.gone:
                continue                          # its exit went on: the job ends as any rank failure does
            reply = replies.get(r)
            if reply is not None and reply["found"] and reply["code"] == 0:
                continue                          # it ended well: the others' hang, reported as such
            if (reply is not None and not reply["returned"]) or now - sent >= FINISH_GRACE_S:
                why = reply["why"] if reply is not None and reply["why"] else (
                    "its wrapper could not let the exit go on" if reply is not None else
                    f"its exit did not end the job within {FINISH_GRACE_S:g} s")
                self._exit_failure = {"rank": r, "host": self.rank_hosts[r], "t": self.clock.time() - (now - sent),
                                      "code": reply["code"] if reply is not None else None, "why": why}
                log.error("rank %d on %s called exit and waits in MPI_Finalize (%s): stopping the job", r,
                          self.rank_hosts[r], why)
                return

    def _publish(self, text: str, stall: Stall, stacks: Mapping[int, dict], samples: Mapping[int, RankSample],
                 gone: Mapping[int, str], kind: str) -> None:
        """One report out: kept, written atomically, printed; its data kept as ``hang``."""
        self.watch.reported = True
        self._reported_at = self.clock.monotonic()
        self.reports.append(text)
        self.report_path = write_report(self.opt_ml, text)
        self.hang = hang_json(stall, stacks, samples, self.rank_hosts, gone, self.stall_s, self.clock.time(),
                              kind, self.report_path)
        where = f"mpirun_kit: hang report written to {self.report_path}" if self.report_path else ""
        if self.out is not None:   # the master's log stream
            print(text + where, file=self.out, flush=True)
        else:
            log.error("%s%s", text.removeprefix("mpirun_kit: "), where)

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
        samples, gone = self.watch.sample_snapshot(), dict(self.watch.exits)
        text = render_report(stall, self.watch.snapshot(), stacks, self.rank_hosts, self.stall_s,
                             self.clock.time(), self.clock.monotonic(), self.hang_abort_s, samples, gone)
        self._publish(text, stall, stacks, samples, gone, "stall" if stall.all else "behind")
