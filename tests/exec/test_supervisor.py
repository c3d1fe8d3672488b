"""The one supervisor (exec/supervisor.py): its phases driven by a fake child on a stepped clock, then real
process groups (the stop sequence for a group we did not start, ``stop_process_group``, as ``cancel`` uses it).

The clock is injected: every ``sleep`` moves it by the asked time at once, so a test of "SIGKILL after the
grace period" takes no real time and asserts the order of the steps, never a duration."""
import os
import signal
import subprocess
import sys

import psutil
import pytest

from mpirun_kit.errors import ExitCode
from mpirun_kit.exec.supervisor import (Phase, ProcessChild, Stop, Supervisor, deadline_stop, signal_stop,
                                        start_process, stop_process_group)

from clock_kit import FakeClock

pytestmark = pytest.mark.timeout(60)


class FakeChild:
    """Records the supervisor's calls; ends ``ends_after`` ticks after the call named ``end_on``."""

    def __init__(self, end_on=None, ends_after=0, code=0, terminate_returns=None):
        self.steps, self.code, self.end_on, self.ends_after = [], code, end_on, ends_after
        self.terminate_returns = terminate_returns
        self.countdown = None
        self.polls = 0
        self.clock = FakeClock(now=100.0, wall=0.0)

    def poll(self):
        self.polls += 1
        if self.end_on is None and self.ends_after and self.polls > self.ends_after:
            return self.code
        if self.countdown is not None:
            self.countdown -= 1
            if self.countdown <= 0:
                return self.code
        return None

    def _mark(self, name):
        self.steps.append(name)
        if name == self.end_on:
            self.countdown = self.ends_after

    def terminate(self, stop):
        self._mark(("terminate", stop.source, stop.signal))
        if self.end_on == "terminate":
            self.countdown = self.ends_after
        return self.terminate_returns

    def stopping(self):
        return None

    def kill(self):
        self._mark("kill")
        if self.end_on == "kill":
            self.countdown = self.ends_after

    def drain(self, deadline):
        self.steps.append("drain")

    def wait(self, seconds):
        self.clock.sleep(seconds)


def test_a_child_that_ends_on_its_own_is_drained_once_and_has_no_stop():
    child = FakeChild(ends_after=3, code=7)
    sup = Supervisor(child, clock=child.clock)
    ended = sup.run()
    assert (ended.returncode, ended.stop, ended.killed, ended.abandoned) == (7, None, False, False)
    assert child.steps == ["drain"]
    assert sup.phase is Phase.DONE


def test_the_deadline_stops_the_child_as_the_launcher_and_kills_it_after_the_grace_period():
    child = FakeChild(end_on="kill", ends_after=1, code=-9)
    phases = []
    ended = Supervisor(child, deadline_s=5.0, grace_s=3.0, clock=child.clock, on_tick=phases.append).run()
    assert child.steps == [("terminate", "launcher", None), "kill", "drain"]
    assert ended.stop == deadline_stop(5.0) and ended.stop.exit_code == ExitCode.TIMEOUT
    assert ended.killed and ended.returncode == -9
    assert phases[0] is Phase.RUNNING and Phase.STOPPING in phases and phases[-1] is Phase.DRAINING


def test_a_signal_is_a_users_stop_with_128_plus_n():
    for name, code in (("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)):
        stop = signal_stop(name)
        assert (stop.source, stop.signal, stop.exit_code) == ("user", name, code)


def test_a_requested_stop_that_the_child_obeys_needs_no_kill():
    child = FakeChild(end_on="terminate", ends_after=2, code=-15)
    asked = {"n": 0}

    def requested():
        asked["n"] += 1
        return signal_stop("SIGINT") if asked["n"] == 3 else None

    ended = Supervisor(child, grace_s=10.0, requested=requested, clock=child.clock).run()
    assert child.steps == [("terminate", "user", "SIGINT"), "drain"]
    assert not ended.killed and ended.stop.exit_code == 130


def test_request_stop_from_another_thread_wins_over_later_requests_and_the_deadline():
    child = FakeChild(end_on="terminate", ends_after=1)
    sup = Supervisor(child, deadline_s=0.0, clock=child.clock)
    sup.request_stop(Stop("user", "mpirun_kit cancel", ExitCode.SIGTERM, "SIGTERM"))
    sup.request_stop(signal_stop("SIGINT"))
    ended = sup.run()
    assert ended.stop.why == "mpirun_kit cancel"


def test_a_child_that_survives_sigkill_is_given_up_within_the_kill_wait():
    child = FakeChild()          # never ends
    ended = Supervisor(child, deadline_s=1.0, grace_s=1.0, kill_wait_s=2.0, clock=child.clock).run()
    assert ended.abandoned and ended.killed and ended.returncode is None
    assert child.steps == [("terminate", "launcher", None), "kill", "drain"]


def test_terminate_may_postpone_the_kill_until_stopping_moves_it():
    class Stepped(FakeChild):
        def __init__(self):
            super().__init__(end_on="kill", ends_after=1)
            self.ticks = 0

        def stopping(self):
            self.ticks += 1
            return 0.5 if self.ticks == 20 else None

    child = Stepped()
    child.terminate_returns = float("inf")
    ended = Supervisor(child, deadline_s=0.0, grace_s=1.0, clock=child.clock).run()
    assert child.ticks >= 20 and ended.killed   # no SIGKILL before stopping() moved the deadline


# -- real processes ---------------------------------------------------------------------------------------

def _tree(tmp_path):
    """A parent that starts a child in its own group and ignores SIGTERM if asked; prints both pids."""
    return [sys.executable, "-c",
            "import os, signal, subprocess, sys, time\n"
            "if sys.argv[1] == 'stubborn': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "c = subprocess.Popen(['sleep', '60'])\n"
            "print(os.getpid(), c.pid, flush=True)\n"
            "time.sleep(60)\n"]


@pytest.mark.parametrize("mode", ["polite", "stubborn"])
def test_process_child_stops_the_whole_group_and_leaves_nothing(tmp_path, mode):
    proc = start_process(_tree(tmp_path) + [mode], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    sup = Supervisor(ProcessChild(proc, term_group=True), grace_s=1.0)
    sup.request_stop(signal_stop("SIGHUP"))
    ended = sup.run()
    assert ended.killed is (mode == "stubborn")
    assert ended.stop.exit_code == 129
    gone, alive = psutil.wait_procs([psutil.Process(p) for p in pids if psutil.pid_exists(p)], timeout=10)
    assert alive == []


@pytest.mark.parametrize("mode", ["polite", "stubborn"])
def test_stop_process_group_of_a_process_we_did_not_start(tmp_path, mode):
    # The group leader is started by someone else (here: a shell that is not our child's Popen object).
    proc = subprocess.Popen(_tree(tmp_path) + [mode], stdout=subprocess.PIPE, text=True, start_new_session=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    res = stop_process_group(pids[0], grace_s=1.0)
    proc.wait(10)
    assert res.gone and res.killed is (mode == "stubborn")
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def test_stop_process_uses_the_callers_liveness_and_kill():
    """``cancel ID`` passes a start-time check (a reused pid is not the supervisor) and its own SIGKILL."""
    from mpirun_kit.exec.supervisor import stop_process

    proc = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                             "time.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    killed = []

    def kill(pid):
        killed.append(pid)
        os.kill(pid, signal.SIGKILL)

    try:
        res = stop_process(proc.pid, 0.5, alive=lambda pid: proc.poll() is None, kill=kill)
        assert res.gone and res.killed and killed == [proc.pid]
        assert proc.returncode == -9
    finally:
        proc.kill()
