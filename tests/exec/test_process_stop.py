"""run_launcher's stop through the ranks (``rank_stop``, exec/channel/stop.py): the master-side sequence.

The launcher is a real process (a Python stand-in for mpirun that records the SIGTERM it gets); the
RankStopper is a scripted fake (the channel side is tested in test_rank_stop.py, the wrapper side in
tests/rank/test_wrapper_stop.py, all of it together on the simulated cluster in
tests/entrypoint/test_sim_stop.py).  The clock is injected and frozen unless a test moves it, so a
sequence that waited for grace_s where it must not would never end (the thread's join fails)."""
import io
import sys
import threading
import time

import pytest

from mpirun_kit.exec.process import run_launcher
from mpirun_kit.plan.mpi import FLAVOURS

from clock_kit import FakeClock

pytestmark = pytest.mark.timeout(60)
TAG = FLAVOURS["openmpi4"].tag_regex
GRACE_S = 30.0


class ScriptedStop:
    """A RankStopper whose reachable and pending ranks the test sets; it notes whether mpirun had its SIGTERM
    when each step came."""

    def __init__(self, reached, term_file, all_exited=False, quit_file=None):
        self.reached = frozenset(reached)
        self.exited_all = all_exited
        self.quit_file = quit_file        # the release ends the stand-in mpirun, as the last ranks' exits would
        self.waiting = set(reached)
        self.term_file = term_file
        self.begun = threading.Event()
        self.steps = []

    def begin(self, signal_name):
        self.steps.append(("begin", signal_name, self.term_file.exists()))
        self.begun.set()
        return self.reached

    def pending(self):
        if self.waiting and self.term_file.exists():
            self.steps.append(("mpirun signalled while ranks were pending",))
        return frozenset(self.waiting)

    def all_exited(self):
        return self.exited_all and not self.waiting

    def release(self):
        self.steps.append(("release", self.term_file.exists()))
        if self.quit_file is not None:
            self.quit_file.touch()


def stand_in(tmp_path):
    """A stand-in for mpirun: ready file, TERM file + exit 143 on SIGTERM, exit 7 when the quit file appears."""
    return ("import os, signal, sys, time\n"
            f"def term(*a): open({str(tmp_path / 'term')!r}, 'w').close(); sys.exit(143)\n"
            "signal.signal(signal.SIGTERM, term)\n"
            f"open({str(tmp_path / 'ready')!r}, 'w').close()\n"
            "end = time.monotonic() + 50\n"   # never outlive a failed test for long
            f"while not os.path.exists({str(tmp_path / 'quit')!r}) and time.monotonic() < end: time.sleep(0.02)\n"
            "sys.exit(7)\n")


def start(tmp_path, stop, clock, job_s=None, cancel=True, grace_s=GRACE_S):
    box = {}

    def go():
        box["res"] = run_launcher(
            [sys.executable, "-c", stand_in(tmp_path)], {"PATH": "/usr/bin:/bin"}, rank_hosts={0: "algo-1"},
            tag_regex=TAG, grace_s=grace_s, job_timeout_s=job_s, clock=clock, stdout=io.BytesIO(),
            stderr=io.BytesIO(), rank_stop=stop,
            cancelled=lambda: "SIGTERM" if cancel and (tmp_path / "ready").exists() else None)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, box


def finished(t, box):
    t.join(timeout=20)
    assert not t.is_alive(), "run_launcher still waiting"
    return box["res"]


def test_no_rank_reachable_means_sigterm_to_mpirun_at_once(tmp_path):
    """No channel key, no wrapper connected, every host lost: nothing to wait for, not even on a frozen clock."""
    stop = ScriptedStop((), tmp_path / "term")
    res = finished(*start(tmp_path, stop, FakeClock(now=1000.0, wall=0.0, frozen=True)))
    assert (res.returncode, res.interrupted_by) == (143, "SIGTERM")
    assert stop.steps[0] == ("begin", "SIGTERM", False)
    assert ("mpirun signalled while ranks were pending",) not in stop.steps


def test_ranks_asked_first_then_released_then_mpirun_once_they_have_exited(tmp_path):
    stop = ScriptedStop({0, 1}, tmp_path / "term")
    t, box = start(tmp_path, stop, FakeClock(now=1000.0, wall=0.0, frozen=True))
    assert stop.begun.wait(20)
    time.sleep(0.3)                       # the loop goes round: mpirun must be left alone meanwhile
    assert not (tmp_path / "term").exists()
    stop.waiting.discard(0)
    time.sleep(0.2)
    assert not (tmp_path / "term").exists()   # one rank still in its handler
    stop.waiting.clear()                  # the clock never moved: only the ranks' exits end the wait
    res = finished(t, box)
    assert (res.returncode, res.interrupted_by) == (143, "SIGTERM")
    # Rank 2 (say) never reported: mpirun's SIGTERM goes first, then the release.
    assert [s[0] for s in stop.steps] == ["begin", "release"] and stop.steps[0][2] is False


def test_grace_over_releases_and_stops_mpirun_with_ranks_still_running(tmp_path, caplog):
    clock = FakeClock(now=1000.0, wall=0.0, frozen=True)
    stop = ScriptedStop({0, 1}, tmp_path / "term")
    t, box = start(tmp_path, stop, clock)
    assert stop.begun.wait(20)
    time.sleep(0.3)                       # the wait's deadline is taken just after begin() returns
    clock.now += GRACE_S - 1
    time.sleep(0.3)
    assert not (tmp_path / "term").exists()
    clock.now += 1
    res = finished(t, box)
    assert (res.returncode, res.interrupted_by) == (143, "SIGTERM")
    assert [s[0] for s in stop.steps] == ["begin", "release"]
    assert "2 rank(s) still running 30 s after they were asked to stop (ranks 0, 1)" in caplog.text


def test_mpirun_ending_during_the_stop_still_releases_the_ranks(tmp_path):
    stop = ScriptedStop({0}, tmp_path / "term")
    t, box = start(tmp_path, stop, FakeClock(now=1000.0, wall=0.0, frozen=True))
    assert stop.begun.wait(20)
    (tmp_path / "quit").touch()
    res = finished(t, box)
    assert (res.returncode, res.interrupted_by) == (7, "SIGTERM")
    assert stop.steps == [("begin", "SIGTERM", False), ("release", False)]


def test_job_deadline_stops_through_the_ranks_too(tmp_path):
    clock = FakeClock(now=1000.0, wall=0.0, frozen=True)
    stop = ScriptedStop({0}, tmp_path / "term")
    t, box = start(tmp_path, stop, clock, job_s=60.0, cancel=False)
    while not (tmp_path / "ready").exists():
        time.sleep(0.02)
    clock.now += 61
    assert stop.begun.wait(20)
    stop.waiting.clear()
    res = finished(t, box)
    assert res.timed_out and res.interrupted_by is None and res.returncode == 143
    assert [s[0] for s in stop.steps] == ["begin", "release"]


def test_no_grace_means_no_ranks_asked(tmp_path):
    """grace_s = 0 (allowed: no clean-up time wanted): mpirun's SIGTERM at once, as before."""
    stop = ScriptedStop({0, 1}, tmp_path / "term")
    res = finished(*start(tmp_path, stop, FakeClock(now=1000.0, wall=0.0, frozen=True), grace_s=0.0))
    assert res.interrupted_by == "SIGTERM" and res.returncode in (143, None)
    assert stop.steps == []


def test_every_rank_exited_lets_mpirun_end_by_itself_without_sigterm(tmp_path):
    """Every rank has exited: mpirun gets no SIGTERM (its SIGTERM path sleeps its 1-s kill timeout, and a
    SIGTERM while it ends can crash it); the released wrappers' exits end it (here the release makes the
    stand-in exit 7)."""
    stop = ScriptedStop({0, 1}, tmp_path / "term", all_exited=True, quit_file=tmp_path / "quit")
    t, box = start(tmp_path, stop, FakeClock(now=1000.0, wall=0.0, frozen=True))
    assert stop.begun.wait(20)
    stop.waiting.clear()
    res = finished(t, box)
    assert (res.returncode, res.interrupted_by) == (7, "SIGTERM")
    assert not (tmp_path / "term").exists()
    assert stop.steps == [("begin", "SIGTERM", False), ("release", False)]


def test_every_rank_exited_but_mpirun_stays_gets_sigkill_at_grace(tmp_path):
    clock = FakeClock(now=1000.0, wall=0.0, frozen=True)
    stop = ScriptedStop({0, 1}, tmp_path / "term", all_exited=True)
    t, box = start(tmp_path, stop, clock)
    assert stop.begun.wait(20)
    stop.waiting.clear()
    while len(stop.steps) < 2:            # released
        time.sleep(0.02)
    time.sleep(0.3)
    assert t.is_alive() and not (tmp_path / "term").exists()
    clock.now += GRACE_S                  # the SIGKILL comes when it would have without the ranks' stop
    res = finished(t, box)
    assert (res.returncode, res.signal, res.interrupted_by) == (None, "SIGKILL", "SIGTERM")
    assert not (tmp_path / "term").exists()
