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


# -- run(): a command to its end, for its exit code and output (issue 38 item 4) ----------------------------------
def test_run_keeps_stdout_and_stderr_apart_with_the_exit_code():
    from mpirun_kit.exec.command import run

    done = run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_run_hands_its_input_over_once_across_the_polls():
    """The command reads its stdin only after a few polls: the input reaches it whole (communicate() polled
    with the input raised ValueError on its second call, and without it never sent the rest; the Slurm
    runner's writes hit that)."""
    from mpirun_kit.exec.command import run

    data = "x" * 300_000   # more than a pipe holds: the write spans polls
    done = run(["sh", "-c", "sleep 0.3; wc -c"], input=data)
    assert (done.returncode, done.stdout.strip()) == (0, "300000")


def test_run_past_its_deadline_is_killed_and_check_names_the_command():
    from mpirun_kit.exec.command import CommandFailed, run

    with pytest.raises(TimeoutError, match=r"^sleep 30 did not end within 30 s \(killed\)$"):
        run(["sleep", "30"], timeout_s=30.0, clock=FakeClock(jump=60.0))
    with pytest.raises(CommandFailed, match=r"^sh -c echo nope >&2; exit 2 exited with code 2: nope$"):
        run(["sh", "-c", "echo nope >&2; exit 2"], check=True)
