"""The master's stall policy and hang report, driven by an injected clock (no processes needed)."""
from pathlib import Path

import io

from mpirun_kit.observe.hang import (HangMonitor, HangWatch, Stall, check_observe_report, progress_lines, render_report,
                                     suspects, write_report)

from clock_kit import FakeClock

HOSTS = {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"}


def advance_all(w, clock, step, dt):
    for r in HOSTS:
        w.progress(r, step)
    clock.now += dt


def test_no_progress_reported_is_never_a_hang():
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    clock.now += 3600
    assert w.check() is None


def test_slow_but_advancing_rank_is_never_reported():
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    for step in range(50):
        for r in (0, 1, 2):
            w.progress(r, step * 10)          # fast ranks: 10 steps a second
        if step % 4 == 0:
            w.progress(3, step // 4)          # rank 3: one step every 4 s, far behind in steps
        clock.now += 1.0
        assert w.check() is None, step


def test_all_stalled_after_stall_s():
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    advance_all(w, clock, 1, 4.9)
    assert w.check() is None
    clock.now += 0.2
    stall = w.check()
    assert stall is not None and stall.all and set(stall.ranks) == set(HOSTS)


def test_one_rank_behind_the_others():
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    for step in range(7):
        for r in (0, 1, 2):
            w.progress(r, step)
        if step == 0:
            w.progress(3, 0)
        clock.now += 1.0
    stall = w.check()
    assert stall is not None and not stall.all and list(stall.ranks) == [3]


def test_rank_that_never_reports_while_others_do_is_behind():
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    for step in range(7):
        for r in (0, 1, 2):
            w.progress(r, step)
        clock.now += 1.0
    stall = w.check()
    assert stall is not None and list(stall.ranks) == [3]


def test_report_once_then_rearmed_by_progress():
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    advance_all(w, clock, 1, 6)
    assert w.check() is not None
    w.reported = True
    clock.now += 60
    assert w.check() is None
    w.progress(0, 2)
    clock.now += 6
    assert w.check() is not None


def test_exited_rank_is_not_judged():
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    advance_all(w, clock, 1, 1)
    w.exited(3)
    for step in range(2, 10):
        for r in (0, 1, 2):
            w.progress(r, step)
        clock.now += 1
    assert w.check() is None


def stacks_at(line):
    return {"threads": [{"thread": "MainThread", "frames": [{"name": "f", "file": "prog.py", "line": line}]}],
            "how": "py-spy"}


def test_suspect_is_the_rank_waiting_where_the_majority_does_not():
    stall = Stall({r: 6.0 for r in HOSTS}, True)
    stacks = {0: stacks_at(10), 1: stacks_at(10), 2: stacks_at(10), 3: stacks_at(7)}
    assert suspects(stall, stacks) == [3]
    # Two ranks at different lines (issue 29: this said "none singled out"): no majority, so both are named.
    assert suspects(stall, {0: stacks_at(10), 1: stacks_at(7)}) == [0, 1]
    assert suspects(stall, {0: stacks_at(10), 1: stacks_at(10)}) == []    # the same place: nobody
    assert suspects(Stall({2: 6.0}, False), {}) == [2]


def test_report_names_rank_host_step_duration_and_frames(tmp_path):
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    advance_all(w, clock, 7, 6.5)
    stall = w.check()
    stacks = {0: stacks_at(10), 1: stacks_at(10), 2: stacks_at(10), 3: stacks_at(7)}
    text = render_report(stall, w.snapshot(), stacks, HOSTS, 5, clock.time(), clock.monotonic(), 30)
    assert "no rank advanced for 6.5 s (timeouts.stall_s = 5 s)" in text
    assert "suspect: rank 3 on algo-2: in f (prog.py:7) while ranks 0, 1, 2 wait in f (prog.py:10)" in text
    assert "* rank 3 on algo-2: last step 7, 6.5 s ago" in text
    assert "      f (prog.py:7)" in text and "      f (prog.py:10)" in text
    assert "exit code 76 (hung) if no rank advances within 30 s (timeouts.hang_abort_s)" in text
    path = write_report(tmp_path, text)
    assert path == tmp_path / "output" / "hang-report.txt" and path.read_text() == text


def test_check_observe_report_rejects_bad_fields():
    assert check_observe_report({"event": "progress", "rank": 1, "step": -1}, HOSTS)[1] \
        == "progress step -1 is not a non-negative integer"
    assert check_observe_report({"event": "progress", "rank": 1, "step": True}, HOSTS)[0] is None
    ok, _ = check_observe_report({"event": "progress", "rank": 1, "step": 5, "host": "x"}, HOSTS)
    assert ok == {"event": "progress", "rank": 1, "host": "algo-1", "step": 5}
    bad, why = check_observe_report({"event": "stacks", "rank": 1, "threads": [{"frames": [{"name": 1}]}],
                                     "how": ""}, HOSTS)
    assert bad is None and why == "a stack frame needs a text name and file and an integer line"


def test_monitor_reports_with_stacks_and_aborts_after_hang_abort_s(tmp_path):
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    asked = []

    def request(ranks):
        asked.append(list(ranks))
        for r in ranks:   # the ranks answer at once (the channel's thread would call on_report)
            mon.on_report({"event": "stacks", "rank": r, "host": HOSTS[r], **stacks_at(7 if r == 3 else 10)})
        return ranks

    mon = HangMonitor(HOSTS, 5, 20, tmp_path, request, clock=clock)
    for r in HOSTS:
        mon.on_report({"event": "progress", "rank": r, "step": 3})
    clock.now += 6
    mon._report(mon.watch.check())
    assert asked == [[0, 1, 2, 3]]
    assert (tmp_path / "output" / "hang-report.txt").read_text() == mon.last_report()
    assert "suspect: rank 3 on algo-2" in mon.last_report()
    assert mon.watch.check() is None and not mon.hung()
    clock.now += 21
    mon._stop.wait = lambda t, _n=[0]: _n.__setitem__(0, _n[0] + 1) or _n[0] > 1   # one tick, then stop
    mon._run()
    assert mon.hung()


def test_ranks_done_and_waiting_for_a_slow_one_are_not_behind():
    """Fast ranks finish and wait (MPI_Finalize) while rank 1 still advances slowly: no report."""
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=3, clock=clock)
    for r in (0, 2, 3):
        w.progress(r, 5)                      # done: every step reported, now idle
    for step in range(5):
        w.progress(1, step)
        clock.now += 1.5
        assert w.check() is None, step


def test_done_ranks_waiting_after_the_last_one_exits_are_not_hung():
    """The slow rank finishes and exits; the others, done long ago, wait in MPI_Finalize: no report."""
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=3, clock=clock)
    for r in (0, 2, 3):
        w.progress(r, 5)
    for step in range(6):
        w.progress(1, step)
        clock.now += 1.5
    w.exited(1)
    clock.now += 0.5
    assert w.check() is None
    w2 = HangWatch(HOSTS, stall_s=3, clock=clock)     # but a rank below the top step is still judged
    for r in (0, 1, 2):
        w2.progress(r, 5)
    w2.progress(3, 2)
    w2.exited(0)
    clock.now += 10
    stall = w2.check()
    assert stall is not None and set(stall.ranks) == {3}


def test_plan_shows_the_stall_policy():
    from mpirun_kit.cluster import Cluster, Host
    from mpirun_kit.spec.launch_spec import LaunchSpec, Timeouts
    from mpirun_kit.plan import build_launch_plan, render

    cluster = Cluster(hosts=(Host("algo-1"), Host("algo-2")), current_host="algo-1", source="test")
    default = render(build_launch_plan(LaunchSpec(program=("p",)), cluster, {}, 0))
    # issue #40: unattended by default, a hang is reported and the job stopped 2 x stall_s later
    assert ("  stalls     hang report after 300s without progress (progress.step, else seen from outside: I/O, "
            "stacks); job stopped 600s after the report (exit 76, 2 x stall_s)\n") in default
    spec = LaunchSpec(program=("p",), timeouts=Timeouts(stall_s=30, hang_abort_s=120))
    assert "hang report after 30s without progress" in render(build_launch_plan(spec, cluster, {}, 0))
    assert "job stopped 120s after the report (exit 76)" in render(build_launch_plan(spec, cluster, {}, 0))
    never = LaunchSpec(program=("p",), timeouts=Timeouts(hang_abort_s=0))
    assert "stacks); no abort (timeouts.hang_abort_s: 0)\n" in render(build_launch_plan(never, cluster, {}, 0))


def test_a_job_spec_may_say_never_stop_a_hung_job():
    """hang_abort_s: 0 in a job spec (a YAML key) is 'never'; the default is 2 x stall_s (issue #40)."""
    from mpirun_kit.spec.compile import compile_job
    from mpirun_kit.spec.load import load_job_text

    def compiled(extra: str):
        return compile_job(load_job_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: x\nprogram: {command: [x]}\n"
                                         + extra, "x.yaml")).launch.timeouts

    assert compiled("timeouts: {hang_abort_s: 0}\n").hang_abort_after() is None
    assert compiled("timeouts: {stall_s: 60}\n").hang_abort_after() == 120
    assert compiled("").hang_abort_after() == 600


def test_master_logs_each_hosts_progress(tmp_path):
    """The lines the SageMaker metric definitions read: each host's slowest rank, the job's lowest and highest."""
    out = io.StringIO()
    mon = HangMonitor(HOSTS, 600, None, tmp_path, lambda ranks: ranks, clock=FakeClock(now=1000.0, wall=1_700_000_000.0), out=out)
    mon._log_progress()
    assert out.getvalue() == ""                      # nothing reported yet: no lines
    for r, step in ((0, 5), (1, 7), (2, 4)):        # rank 3 has not reported
        mon.on_report({"event": "progress", "rank": r, "step": step})
    mon._log_progress()
    assert out.getvalue().splitlines() == ["mpirun_kit: progress host=algo-1 step=5",
                                           "mpirun_kit: progress host=algo-2 step=4",
                                           "mpirun_kit: progress job min_step=4 max_step=7"]
    mon._log_progress()                              # nothing changed: not repeated
    assert len(out.getvalue().splitlines()) == 3
    assert progress_lines(mon.watch.snapshot(), HOSTS) == out.getvalue().splitlines()


def test_progress_lines_stay_off_the_stream_under_a_plain_submit(tmp_path, caplog):
    """A plain `submit` (local/sim) prints no tool lines: the progress lines go to the log (INFO, -v)."""
    import logging

    out = io.StringIO()
    mon = HangMonitor(HOSTS, 600, None, tmp_path, lambda ranks: ranks, clock=FakeClock(now=1000.0, wall=1_700_000_000.0), out=out, progress_to_out=False)
    mon.on_report({"event": "progress", "rank": 0, "step": 5})
    with caplog.at_level(logging.INFO, logger="mpirun_kit.observe.hang"):
        mon._log_progress()
    assert out.getvalue() == ""
    assert "progress host=algo-1 step=5" in caplog.text


def test_frame_thread_and_file_names_are_escaped_in_the_report():
    """Issue 23: names come from the program; a newline in one forged a report line (and an escape sequence would
    drive the reader's terminal).  Before, the text went into hang-report.txt as it came."""
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    advance_all(w, clock, 7, 6.5)
    evil = {"threads": [{"thread": "Main\x1b[2J", "frames": [
        {"name": "f\n* rank 0 on algo-1: last step 99", "file": "p\\.py", "line": 1}]}], "how": "py-spy\r"}
    text = render_report(w.check(), w.snapshot(), {1: evil}, HOSTS, 5, clock.time(), clock.monotonic(), None)
    assert "\n* rank 0 on algo-1: last step 99" not in text and "\x1b" not in text and "\r" not in text
    assert "    thread Main\\x1b[2J (py-spy\\r), innermost first:" in text
    assert "      f\\n* rank 0 on algo-1: last step 99 (p\\\\.py:1)" in text


# -- issue 29: programs that report nothing, judged from their wrappers' samples ---------------------------------

EXIT3 = [{"name": "usleep", "file": "libc.so.6", "line": 0},
         {"name": "ompi_mpi_finalize", "file": "libmpi.so", "line": 0},
         {"name": "Py_Exit", "file": "libpython3.11.so", "line": 0}]
IN_BARRIER = [{"name": "PMPI_Barrier", "file": "libmpi.so", "line": 0}, {"name": "<module>", "file": "p.py", "line": 6}]


def test_samples_judge_a_program_that_reports_nothing():
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    for r in HOSTS:
        w.sample(r, 4.0, IN_BARRIER, "py-spy")
    assert w.check() is None                          # 4 s unchanged: not yet
    for r in (0, 1, 2):
        w.sample(r, 6.0, IN_BARRIER, "py-spy")
    assert w.check() is None                          # rank 3's last sample says 4 s: not every rank
    w.sample(3, 5.5, IN_BARRIER, "py-spy")
    stall = w.check()
    assert stall is not None and stall.all and set(stall.ranks) == set(HOSTS)
    w.reported = True
    w.sample(2, 0.0, [], "activity")                  # it changed after the report: re-armed
    assert not w.reported


def test_a_rank_in_finalize_under_exit_while_the_others_wait_is_exiting_alone():
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    w = HangWatch(HOSTS, stall_s=5, clock=clock)
    w.sample(1, 6.0, EXIT3, "eu-stack")
    for r in (0, 2, 3):
        w.sample(r, 2.0, IN_BARRIER, "py-spy")
    assert w.exiting_alone() == []                    # the others changed 2 s ago: they may still advance
    for r in (0, 2, 3):
        w.sample(r, 5.0, IN_BARRIER, "py-spy")
    assert w.exiting_alone() == [1]
    w.sample(3, 9.0, [{"name": "matmul", "file": "train.py", "line": 40}], "py-spy")
    assert w.exiting_alone() == []                    # rank 3 computes (outside MPI): it may still come to finalize
    w2 = HangWatch({0: "a", 1: "a"}, stall_s=5, clock=clock)
    for r in (0, 1):
        w2.sample(r, 9.0, EXIT3, "eu-stack")
    assert w2.exiting_alone() == []                   # every rank exiting: they finish together


def test_monitor_asks_the_exiting_rank_to_finish_and_stops_the_job_when_it_cannot(tmp_path):
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    sent = []
    mon = HangMonitor(HOSTS, 5, None, tmp_path, lambda ranks: [], clock=clock, out=io.StringIO(),
                      send=lambda ranks, msg: sent.append((list(ranks), msg)) or list(ranks))
    mon.on_report({"event": "start", "rank": 2})
    assert sent == [([2], {"type": "watch", "stall_s": 5})]
    mon.on_report({"event": "sample", "rank": 1, "quiet_s": 6.0, "frames": EXIT3, "how": "eu-stack"})
    for r in (0, 2, 3):
        mon.on_report({"event": "sample", "rank": r, "quiet_s": 6.0, "frames": IN_BARRIER, "how": "py-spy"})
    mon._check_exits()
    assert sent[-1] == ([1], {"type": "finish"})
    assert "a rank exits alone" in mon.last_report() and mon.hang["kind"] == "exit" and mon.hang["suspects"] == [1]
    assert not mon.stop_asked()
    mon.on_report({"event": "finish", "rank": 1, "found": True, "returned": False, "code": 3,
                   "why": "gdb is not installed (apt-get install gdb)"})
    mon._check_exits()
    assert mon.stop_asked() and mon.exit_failure()["code"] == 3 and mon.exit_failure()["rank"] == 1
    assert mon.exit_failure()["why"] == "gdb is not installed (apt-get install gdb)"


def test_monitor_leaves_a_rank_that_ended_well_to_the_hang_report(tmp_path):
    clock = FakeClock(now=1000.0, wall=1_700_000_000.0)
    mon = HangMonitor(HOSTS, 5, None, tmp_path, lambda ranks: [], clock=clock, out=io.StringIO(),
                      send=lambda ranks, msg: list(ranks))
    mon.on_report({"event": "sample", "rank": 1, "quiet_s": 6.0, "frames": EXIT3, "how": "eu-stack"})
    for r in (0, 2, 3):
        mon.on_report({"event": "sample", "rank": r, "quiet_s": 6.0, "frames": IN_BARRIER, "how": "py-spy"})
    mon._check_exits()
    mon.on_report({"event": "finish", "rank": 1, "found": True, "returned": False, "code": 0, "why": ""})
    clock.now += 120
    mon._check_exits()
    assert not mon.stop_asked()


def test_check_observe_report_takes_samples_and_finish_replies():
    ok, _ = check_observe_report({"event": "sample", "rank": 2, "quiet_s": 3, "sig": "ab", "how": "py-spy",
                                  "frames": IN_BARRIER}, HOSTS)
    assert ok == {"event": "sample", "rank": 2, "host": "algo-2", "quiet_s": 3.0, "sig": "ab", "how": "py-spy",
                  "frames": IN_BARRIER}
    assert check_observe_report({"event": "sample", "rank": 2, "quiet_s": -1, "sig": "", "how": "", "frames": []},
                                HOSTS)[1] == "sample quiet_s -1 is not a non-negative number"
    assert check_observe_report({"event": "sample", "rank": 2, "quiet_s": 1, "sig": "", "how": "",
                                 "frames": [{"name": 1}]}, HOSTS)[1] \
        == "a stack frame needs a text name and file and an integer line"
    assert check_observe_report({"event": "finish", "rank": 1, "code": 300}, HOSTS)[1] \
        == "finish code 300 is not an integer 0-255"
    ok, _ = check_observe_report({"event": "finish", "rank": 1, "found": True, "returned": 1, "code": 3}, HOSTS)
    assert ok["returned"] is False and ok["found"] is True and ok["code"] == 3
