"""Hangs found without the program's help (issue 29), on this machine: real mpirun, 2 or 3 real ranks.

The ranks run tests/bin/hang_modes.py, which never calls mpirun_kit.progress and prints nothing while it
waits: every judgement comes from the rank wrappers' samples of their programs' stacks (py-spy, eu-stack,
gdb).  The same on the simulated cluster, 3 hosts x 2 ranks: test_observe_sim.py.  Each test fails on the
code before issue 29: nothing was judged without progress reports, and the exiting rank hung for ever.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.spec.launch_spec import LaunchSpec, Timeouts

from result_kit import code_and_text

pytestmark = [pytest.mark.timeout(240), pytest.mark.mpi]

REPO = Path(__file__).resolve().parents[2]
PROG = str(REPO / "tests" / "bin" / "hang_modes.py")
PY = sys.executable
STALL_S = 4.0
#: the issue's bound: a silent hang is reported within stall_s + 10 s of the ranks starting to wait.
REPORT_BOUND_S = STALL_S + 10


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp_path: Path, mode: str, odd: int, n: int = 2, *extra: str, stall_s: float = STALL_S):
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = LaunchSpec(program=(PY, PROG, mode, str(odd), str(marks), *extra), processes_per_host=n,
                      result_port=free_port(), timeouts=Timeouts(stall_s=stall_s, grace_s=5.0))
    (tmp_path / "spec.json").write_text(spec.to_json())
    opt_ml = tmp_path / "opt_ml"
    argv = [PY, "-m", "mpirun_kit.cli.main", "launch", "--hosts", f"localhost:{n}", "--opt-ml", str(opt_ml),
            "--spec", str(tmp_path / "spec.json")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SM_HOSTS", None)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return proc, marks, opt_ml / "output"


def wait_for(paths, deadline: Deadline, proc) -> None:
    while not all(p.exists() for p in paths):
        if deadline.expired() or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"{[str(p) for p in paths if not p.exists()]} did not appear in time\n"
                        + proc.communicate()[0])
        time.sleep(0.1)


def stop(proc) -> str:
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=60)[0]


def ended(proc, timeout: float) -> str:
    """The job's output once it ends by itself; stopped (and the test failed) when it does not within timeout."""
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job did not end within {timeout:g} s (stopped):\n" + stop(proc))


def report_when_stuck(tmp_path, mode, odd, n):
    """Start the job, wait until every rank waits (its marker), then for the report within the issue's bound."""
    proc, marks, out = start(tmp_path, mode, odd, n)
    try:
        wait_for([marks / f"stuck.{r}" for r in range(n)], Deadline(SYSTEM_CLOCK, 90), proc)
        wait_for([out / "hang-report.txt"], Deadline(SYSTEM_CLOCK, REPORT_BOUND_S), proc)
        text = (out / "hang-report.txt").read_text()
    finally:
        log = stop(proc)
    return text, log


def test_rank_that_exits_alone_ends_the_job_with_its_code(tmp_path):
    """Issue 29's first finding: rank 1 exits 3 while rank 0 waits in a barrier.  mpi4py's exit hook runs
    MPI_Finalize, which waits for rank 0 for ever: before, a silent hang until stopped by hand.  ``raise
    SystemExit(3)``: an exit the fail-fast hook does not see (sys.exit is, tests/rank/test_fail_fast.py), so the
    hang monitor's exit check is what ends it."""
    proc, _, out = start(tmp_path, "raise3", 1)
    log = ended(proc, 200)
    assert proc.returncode == 3, log
    failure = (out / "failure").read_text()
    assert code_and_text(failure).startswith("exit_code=3\nroot cause: rank 1 on localhost exited with code 3"), failure
    result = json.loads((out / "result.json").read_text())      # what --json carries
    assert result["exit_code"] == 3 and result["hang"]["kind"] == "exit" and result["hang"]["suspects"] == [1]
    assert next(r for r in result["hang"]["ranks"] if r["rank"] == 1)["state"] == "finalize", result["hang"]
    report = (out / "hang-report.txt").read_text()
    assert "a rank exits alone" in report and "suspect: rank 1 on localhost: called exit and waits in MPI_Finalize" \
        in report and "while rank 0 waits in Barrier" in report, report


def test_silent_rank_sleeping_while_the_other_allreduces_is_named_at_2_ranks(tmp_path):
    text, log = report_when_stuck(tmp_path, "sleep", 1, 2)
    assert "no rank changed for" in text and f"(timeouts.stall_s = {STALL_S:g} s)" in text, text
    assert "suspect: rank 1 on localhost: not in a collective: waits in sleep_forever (hang_modes.py:" in text, text
    assert "while rank 0 waits in Allreduce" in text, text
    assert "suspect: rank 0" not in text, text
    assert "mpirun_kit: hang detected at" in log


def test_mismatched_collective_names_the_odd_rank(tmp_path):
    text, _ = report_when_stuck(tmp_path, "mismatch", 1, 3)
    hang = json.loads((tmp_path / "opt_ml" / "output" / "result.json").read_text())["hang"]   # the stop's result
    assert hang["kind"] == "stall" and hang["suspects"] == [1], hang
    assert {r["rank"]: r["call"] for r in hang["ranks"]} == {0: "Allreduce", 1: "Barrier", 2: "Allreduce"}, hang
    assert "suspect: rank 1 on localhost: in Barrier while ranks 0, 2 wait in Allreduce" in text, text
    assert "suspect: rank 0" not in text and "suspect: rank 2" not in text, text


def test_slow_but_advancing_silent_program_is_never_reported(tmp_path):
    """Rank 1 takes 1.5 s a step, the others wait for it in an allreduce, nobody prints or reports progress:
    over 10 steps (five stall_s periods of 3 s) only the loop's counter changes, and that is enough."""
    proc, marks, out = start(tmp_path, "slow", 1, 2, "10", stall_s=3.0)
    log = ended(proc, 200)
    assert proc.returncode == 0, log
    assert (marks / "done.0").exists() and (marks / "done.1").exists()
    assert not (out / "hang-report.txt").exists(), (out / "hang-report.txt").read_text()
    assert "hang detected" not in log


def test_a_program_that_is_not_python_is_read_with_a_native_stack_tool(tmp_path):
    """Issue 29 item 1: py-spy reads only Python; /bin/sleep's stacks come from eu-stack (or gdb)."""
    spec = LaunchSpec(program=("/bin/sleep", "600"), processes_per_host=2, result_port=free_port(),
                      timeouts=Timeouts(stall_s=STALL_S, grace_s=5.0))
    (tmp_path / "spec.json").write_text(spec.to_json())
    out = tmp_path / "opt_ml" / "output"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SM_HOSTS", None)
    proc = subprocess.Popen([PY, "-m", "mpirun_kit.cli.main", "launch", "--hosts", "localhost:2", "--opt-ml",
                             str(tmp_path / "opt_ml"), "--spec", str(tmp_path / "spec.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_for([out / "hang-report.txt"], Deadline(SYSTEM_CLOCK, 60 + REPORT_BOUND_S), proc)
        text = (out / "hang-report.txt").read_text()
    finally:
        stop(proc)
    assert "no rank changed for" in text, text
    assert "thread main (eu-stack" in text or "thread main (gdb" in text, text
    assert "nanosleep" in text, text
    assert "suspect: none singled out" in text, text       # both wait in the same place


def test_a_hang_is_stopped_by_default_and_its_suspects_named_once(tmp_path):
    """Issue #40: no hang_abort_s in the spec, yet the hung job ends by itself (exit 76) 2 x stall_s after its
    report (before: a report only, the job ran for ever); the suspect is named once on the job's stream (before:
    the whole report twice, at the hang and again in the final failure text)."""
    proc, marks, out = start(tmp_path, "sleep", 1, 2)
    log = ended(proc, 90)
    assert proc.returncode == 76, log
    assert log.count("suspect: rank 1 on localhost") == 1, log
    assert "the hang report above names the suspects" in log, log
    failure = (out / "failure").read_text()
    assert f"no rank advanced within {2 * STALL_S:g} s of the hang report (timeouts.hang_abort_s, default 2 x " \
           "stall_s)" in failure and "suspect: rank 1 on localhost" in failure, failure
