"""exec/command.py: the one runner that reads this machine (cluster/local.py's Machine is handed it):
output whatever the exit status, a deadline on the injected clock, a cancel that kills at once."""
from __future__ import annotations

import pytest

from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.exec.command import Cancelled, command_runner, run_for_output

from clock_kit import FakeClock


def test_output_is_stdout_and_stderr_whatever_the_exit():
    assert run_for_output(["sh", "-c", "echo out; echo err >&2; exit 3"]) == "out\nerr\n"


def test_missing_program_is_file_not_found():
    with pytest.raises(FileNotFoundError):
        run_for_output(["no-such-program-mpirun-kit"])


def test_command_that_never_answers_times_out_on_the_injected_clock():
    """`mpirun --version` hanging used to raise subprocess.TimeoutExpired (a traceback) after 30 s."""
    with pytest.raises(TimeoutError) as e:
        run_for_output(["sleep", "30"], timeout_s=30.0, clock=FakeClock(jump=60.0))  # every look a minute later
    assert str(e.value) == "sleep 30 gave no answer within 30 s"


def test_cancel_kills_the_command_at_once():
    looks = []
    deadline = Deadline(SYSTEM_CLOCK, None)
    run = command_runner(cancelled=lambda: looks.append(1) or True)
    with pytest.raises(Cancelled):
        run(["sleep", "30"])
    assert len(looks) == 1   # the first look past the first poll ends it, not the 30 s deadline
    assert deadline.elapsed() < 30
