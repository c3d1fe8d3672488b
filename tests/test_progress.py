"""progress.py: a program's ``step`` calls reach the wrapper's pipe once per new step, never block, never raise.

Each case runs in a fresh interpreter (the module opens the pipe once per process), with a real pipe.
"""
from __future__ import annotations

import os
import subprocess
import sys

from mpirun_kit.progress import PROGRESS_FD_VAR


def _run(code: str, env_fd: int | None, pass_fds=()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != PROGRESS_FD_VAR}
    if env_fd is not None:
        env[PROGRESS_FD_VAR] = str(env_fd)
    return subprocess.run([sys.executable, "-c", "from mpirun_kit import progress\n" + code], env=env,
                          pass_fds=pass_fds, capture_output=True, text=True, timeout=60)


def test_each_new_step_is_one_line_on_the_pipe():
    r, w = os.pipe()
    try:
        done = _run("for n in (1, 1, 2, '3', 3): progress.step(n)\nprint('ok')", w, (w,))
        os.close(w)
        assert done.stdout == "ok\n", done.stderr
        assert os.read(r, 100) == b"1\n2\n3\n"
    finally:
        os.close(r)


def test_outside_mpirun_kit_a_bad_step_or_a_gone_wrapper_it_is_silent():
    assert _run("progress.step(1); progress.step('x'); print('ok')", None).stdout == "ok\n"
    r, w = os.pipe()
    os.close(r)                                  # the wrapper is gone: writes fail with EPIPE
    try:
        done = _run("for n in range(5): progress.step(n)\nprint('ok')", w, (w,))
    finally:
        os.close(w)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


def test_a_full_pipe_drops_reports_instead_of_blocking_the_program():
    r, w = os.pipe()
    try:
        done = _run("for n in range(200000): progress.step(n)\nprint('ok')", w, (w,))
        assert done.stdout == "ok\n", done.stderr   # the pipe (64 KiB) filled; the program went on
    finally:
        os.close(r), os.close(w)
