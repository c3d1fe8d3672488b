"""observe/relay.py's parts a rank wrapper uses before and beside its relay thread: the progress pipe and the
stack file it offers the program, reading a faulthandler dump, and the faulthandler path's own failures.

The relay thread against a real master and program is tested in test_progress_relay.py, the sampling policy
in test_stacks.py.  Here py-spy's lookup is replaced where the test is of the path taken without it (py-spy
is installed in the test venv); every process is real.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from clock_kit import FakeClock

from mpirun_kit.observe import relay
from mpirun_kit.progress import PROGRESS_FD_VAR, STACK_FILE_VAR


def _faulthandler_dump(tmp_path) -> str:
    """A real dump: a program with a second thread, dumped by faulthandler into a file."""
    out = tmp_path / "dump.txt"
    prog = ("import faulthandler, sys, threading\n"
            "ev = threading.Event()\n"
            "def waits_here(): ev.wait()\n"
            "threading.Thread(target=waits_here, daemon=True).start()\n"
            "def main_frame():\n"
            "    with open(sys.argv[1], 'w') as f: faulthandler.dump_traceback(f, all_threads=True)\n"
            "main_frame()\n")
    subprocess.run([sys.executable, "-c", prog, str(out)], check=True, timeout=60)
    return out.read_text()


def test_a_faulthandler_dump_reads_as_threads_of_frames_innermost_first(tmp_path):
    threads = relay._frames_from_faulthandler(_faulthandler_dump(tmp_path))
    assert len(threads) == 2
    names = [[f["name"] for f in t["frames"]] for t in threads]
    assert any(n[:1] == ["main_frame"] for n in names), names
    assert any("waits_here" in n for n in names), names
    assert all(isinstance(f["line"], int) and f["file"] for t in threads for f in t["frames"])


def test_a_dump_is_bounded_to_fit_one_channel_line_and_garbage_is_skipped():
    frame = '  File "/x/prog.py", line 7 in deep\n'
    text = "".join(f"Thread 0x{i:x} (most recent call first):\n" + frame * 100 + '  File "no line number"\n'
                   for i in range(30))
    threads = relay._frames_from_faulthandler(text)
    assert len(threads) == relay.MAX_THREADS
    assert {len(t["frames"]) for t in threads} == {relay.MAX_FRAMES}
    assert threads[0]["frames"][0] == {"name": "deep", "file": "/x/prog.py", "line": 7}


def test_prepare_hands_the_program_the_pipes_write_end_and_without_pyspy_a_stack_file(monkeypatch):
    monkeypatch.setattr(relay, "find_pyspy", lambda path_var=None: None)
    env, r, w, stack_file = relay.prepare({"KEEP": "1"})
    try:
        assert env["KEEP"] == "1" and env[PROGRESS_FD_VAR] == str(w)
        assert env[STACK_FILE_VAR] == stack_file
        assert os.path.basename(stack_file).startswith(f"{relay.STACK_FILE_PREFIX}{os.getpid()}.")
        os.write(w, b"5\n")
        assert os.read(r, 16) == b"5\n"   # the wrapper's end reads what the program writes
        assert not os.get_blocking(r)     # and never blocks the relay thread
    finally:
        os.close(r), os.close(w)
        os.unlink(stack_file)


def test_prepare_offers_no_stack_file_where_pyspy_reads_the_stacks(monkeypatch):
    monkeypatch.setattr(relay, "find_pyspy", lambda path_var=None: "/usr/bin/py-spy")
    env, r, w, stack_file = relay.prepare({})
    os.close(r), os.close(w)
    assert stack_file is None and STACK_FILE_VAR not in env


def test_a_program_that_never_writes_its_stacks_is_given_up_after_2_s_on_the_clock(tmp_path, monkeypatch):
    monkeypatch.setattr(relay, "find_pyspy", lambda path_var=None: None)
    stack_file = tmp_path / "stacks"
    stack_file.write_text("")
    # SIGUSR1 ignored before exec, so the program neither dumps nor dies of it
    prog = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: signal.signal(signal.SIGUSR1, signal.SIG_IGN))
    try:
        clock = FakeClock()
        assert relay.collect_stacks(prog.pid, str(stack_file), True, clock=clock) == (
            [], "the program did not write its stacks within 2 s of SIGUSR1")
        assert 2.0 <= clock.now < 2.5
    finally:
        prog.kill()
        prog.wait()


def test_a_program_that_is_gone_cannot_be_signalled(tmp_path, monkeypatch):
    monkeypatch.setattr(relay, "find_pyspy", lambda path_var=None: None)
    gone = subprocess.Popen(["true"])
    gone.wait()
    stack_file = tmp_path / "stacks"
    stack_file.write_text("")
    threads, why = relay.collect_stacks(gone.pid, str(stack_file), True, clock=FakeClock())
    assert threads == [] and why == "cannot signal the program (No such process)"
