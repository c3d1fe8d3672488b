"""Reading a program's stacks from outside (observe/stacks.py) and the wrapper's sampling policy (relay.Sampler).

Frames are written as py-spy and eu-stack give them; the real readers run against real processes in
test_hang_local.py and test_observe_sim.py.  Pure functions and a stepped clock here.
"""
import subprocess
import sys
import time

import pytest

from mpirun_kit.observe import stacks
from mpirun_kit.observe.hang import Place, odd_ones
from mpirun_kit.observe.relay import COST_FACTOR, MIN_SAMPLE_S, Sampler


def fr(*names_lines):
    return [{"name": n, "file": "prog.py" if line else "libmpi.so", "line": line} for n, line in names_lines]


EXIT3 = fr(("clock_nanosleep@GLIBC_2.2.5", 0), ("usleep", 0), ("ompi_mpi_finalize", 0), ("Py_FinalizeEx", 0),
           ("Py_Exit", 0), ("_PyErr_PrintEx", 0), ("Py_RunMain", 0))
BARRIER = fr(("0x7f24cd64524a", 0), ("opal_progress", 0), ("ompi_request_default_wait", 0), ("PMPI_Barrier", 0),
             ("Barrier", 0), ("<module>", 46))
ALLREDUCE = fr(("sched_yield", 0), ("PMPI_Recv", 0), ("allreduce", 0), ("allreduce_step", 28), ("<module>", 37))
SLEEP = fr(("clock_nanosleep", 0), ("pysleep", 0), ("sleep_forever", 27), ("<module>", 50))


def test_classify_names_finalize_under_exit_collectives_and_the_rest():
    assert stacks.classify(EXIT3) == ("finalize", "exit")
    assert stacks.classify(fr(("ompi_mpi_finalize", 0), ("main", 12))) == ("finalize", "finalize")
    assert stacks.classify(BARRIER) == ("collective", "Barrier")
    assert stacks.classify(ALLREDUCE) == ("collective", "Allreduce")       # mpi4py's pickled allreduce: Recv inside
    assert stacks.classify(fr(("ncclAllReduce", 0), ("train", 3))) == ("collective", "AllReduce")
    assert stacks.classify(fr(("PMPI_Recv", 0), ("main", 3))) == ("p2p", "Recv")
    assert stacks.classify(SLEEP) == ("run", "clock_nanosleep")
    assert stacks.classify([]) == ("unknown", "")


def test_where_is_the_programs_own_line_or_the_mpi_call():
    assert stacks.where(SLEEP) == "sleep_forever (prog.py:27)"
    assert stacks.where(EXIT3) == "ompi_mpi_finalize (libmpi.so)"


def test_signature_ignores_mpis_spinning_but_not_a_new_counter():
    """Inside MPI the innermost frames change at every read (its progress loop); a loop's counter is a change."""
    spun = [{"name": "0x7f24cd6451ff", "file": "libopen-pal.so", "line": 0}, *BARRIER[1:]]
    assert stacks.signature(BARRIER) == stacks.signature(spun)
    assert stacks.signature(SLEEP, ["i=3"]) != stacks.signature(SLEEP, ["i=4"])
    assert stacks.signature(SLEEP) != stacks.signature(ALLREDUCE)


def test_telling_frames_keep_the_program_the_mpi_call_and_the_exit_path():
    assert [f["name"] for f in stacks.telling_frames(BARRIER)] == ["opal_progress", "PMPI_Barrier", "Barrier",
                                                                   "<module>"]
    assert [f["name"] for f in stacks.telling_frames(EXIT3)] == ["clock_nanosleep@GLIBC_2.2.5", "ompi_mpi_finalize",
                                                                 "Py_FinalizeEx", "Py_Exit"]


def test_io_counters_and_wakeups_of_a_real_process():
    p = subprocess.Popen([sys.executable, "-c", "import time\nfor _ in range(40): time.sleep(0.05)\nprint('x')"],
                         stdout=subprocess.DEVNULL)
    try:
        first = stacks.wakeups(p.pid)
        time.sleep(0.5)
        assert stacks.wakeups(p.pid) >= first + 3          # it sleeps and wakes every 50 ms
        assert stacks.io_counters(p.pid) is not None
    finally:
        p.wait()
    assert stacks.wakeups(p.pid) is None and stacks.io_counters(p.pid) is None   # gone


def test_find_tool_skips_relative_path_entries(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "eu-stack-fake"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert stacks.find_tool("eu-stack-fake", "bin::.") is None
    assert stacks.find_tool("eu-stack-fake", f"bin:{tmp_path / 'bin'}") == str(fake)


def test_sampler_interval_is_a_fifth_of_stall_s_and_bounded_by_its_cost():
    s = Sampler(600, now=0.0)
    assert s.interval() == 120.0
    s.cost_s = 2.0                        # a read costing 2 s of CPU: 100 x its cost, the 1 % bound
    assert s.interval() == 200.0 == COST_FACTOR * 2.0
    s.cost_s = 10.0                       # never past half of stall_s, so a stall is still seen
    assert s.interval() == 300.0
    assert Sampler(2, now=0.0).interval() == MIN_SAMPLE_S


def test_sampler_counts_quiet_from_the_last_change():
    s = Sampler(10, now=0.0)
    assert not s.tick(1.0, None, (100, 5)) and not s.due(1.0)
    assert s.tick(1.5, None, (100, 6))                 # a byte written: activity
    assert not s.due(3.0) and s.due(3.6)               # an interval (2 s) after the activity
    assert s.record(3.6, 3.7, "sig-a", 0.01) == pytest.approx(0.1)      # a first signature is a change
    assert s.record(9.0, 9.1, "sig-a", 0.01) == pytest.approx(5.5)      # the same: quiet since 3.6
    assert s.record(12.0, 12.1, "sig-a", 0.01, woke=True) == pytest.approx(0.1)   # woke between reads: a change
    assert s.record(15.0, 15.1, "sig-b", 0.01) == pytest.approx(0.1)
    assert s.tick(16.0, 7, (100, 6))                   # a step reported
    assert s.samples == 4


def test_odd_ones_at_2_ranks_and_at_32():
    coll = Place("collective", "Allreduce", "step (prog.py:11)")
    assert odd_ones({0: coll, 1: Place("run", "clock_nanosleep", "sleep_forever (prog.py:27)")}) == [
        (1, "not in a collective: waits in sleep_forever (prog.py:27) while rank 0 waits in Allreduce")]
    many = {r: coll for r in range(32)}
    many[17] = Place("collective", "Barrier", "sync (prog.py:10)")
    assert odd_ones(many) == [(17, "in Barrier while ranks 0, 1, 2, 3, 4, 5, 6, 7 and 23 more wait in Allreduce")]
    two = {0: coll, 1: Place("collective", "Barrier", "sync (prog.py:10)")}
    assert [r for r, _ in odd_ones(two)] == [0, 1]      # no majority at 2: both named, and why
    assert "with no majority" in odd_ones(two)[0][1]
    fin = {0: coll, 1: Place("finalize", "exit", "ompi_mpi_finalize (libmpi.so)"), 2: coll}
    assert odd_ones(fin) == [(1, "called exit and waits in MPI_Finalize (at ompi_mpi_finalize (libmpi.so)) while "
                                 "ranks 0, 2 wait in Allreduce")]
    assert odd_ones({0: coll}, gone={1: "exited with code 0"}) == [
        (1, "its process is gone (exited with code 0) while rank 0 waits")]
    same_call = {0: coll, 1: coll, 2: Place("collective", "Allreduce", "other (prog.py:40)")}
    assert odd_ones(same_call) == [(2, "in other (prog.py:40) while ranks 0, 1 wait in step (prog.py:11)")]
    assert odd_ones({0: coll, 1: coll}) == []
