"""exec/pdeathsig.py: a child started through ``with_parent_death_signal`` gets its signal when its parent dies.

Real processes: a parent Python starts ``sleep`` through the argv, prints the child's pid and is SIGKILLed; the
child must then end by SIGTERM.  Both forms: setpriv where it is installed, and this module run as a script
(the fallback where it is not).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from mpirun_kit.exec import pdeathsig

PARENT = """
import subprocess, sys, time
from mpirun_kit.exec import pdeathsig
argv = pdeathsig.with_parent_death_signal(["sleep", "60"], 15, None)
if sys.argv[1] == "script":
    argv = [sys.executable, "-I", "-S", pdeathsig._SCRIPT, "15", str(__import__("os").getpid()), "sleep", "60"]
child = subprocess.Popen(argv)
print(child.pid, flush=True)
time.sleep(60)
"""


def _gone(pid: int, within_s: float = 20.0) -> bool:
    """Whether ``pid`` ended (it is a child of init once its parent died: reaped there) within the deadline."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _becomes(pid: int, comm: str, within_s: float = 20.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == comm:
                    return True
        except FileNotFoundError:
            return False
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("form", ["argv", "script"])
def test_the_child_ends_when_its_parent_is_killed(form):
    if form == "argv" and shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed; the script form is the fallback tested beside")
    parent = subprocess.Popen([sys.executable, "-c", PARENT, form], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        # Once the child is `sleep`, the helper set the signal before its exec.  (A parent dying before that is
        # the script's case alone: it checks its parent after prctl; setpriv does not.)
        assert _becomes(child, "sleep"), f"child {child} never exec'd sleep"
        parent.kill()
        parent.wait()
        assert _gone(child), f"child {child} outlived its parent"
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_missing_program_fails_as_an_oserror_not_as_the_helpers_exit():
    with pytest.raises(FileNotFoundError):
        pdeathsig.with_parent_death_signal(["no-such-program-here"], 15, "/nonexistent")
