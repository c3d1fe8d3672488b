"""The live status line on a terminal during a short sim job (issue #28 item 6: none was drawn).

A real pseudo-terminal runs `mpirun_kit submit`; one whose size nobody set reports 0 columns, as a
console without a size does, and the line was cut to nothing (fails before: no "sim: bringing up").
"""
from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time

import pytest

pytestmark = pytest.mark.sim


def on_a_terminal(argv: list[str], rows: int, cols: int, limit_s: float = 180.0) -> str:
    pid, fd = pty.fork()
    if pid == 0:   # the child: its stdin, stdout and stderr are the terminal
        os.execv(sys.executable, [sys.executable, "-m", "mpirun_kit.cli.main", *argv])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    out, end, reaped = b"", time.monotonic() + limit_s, False
    while time.monotonic() < end:
        if select.select([fd], [], [], 0.5)[0]:
            try:
                data = os.read(fd, 65536)
            except OSError:   # the child closed the terminal
                break
            if not data:
                break
            out += data
        elif os.waitpid(pid, os.WNOHANG)[0]:
            reaped = True
            break
    else:
        os.kill(pid, 9)
    if not reaped:
        os.waitpid(pid, 0)
    os.close(fd)
    return out.decode(errors="replace")


@pytest.mark.parametrize("rows, cols", [(40, 120), (0, 0)])
def test_a_short_sim_job_shows_a_status_line_on_a_terminal(rows, cols, tmp_path):
    spec = tmp_path / "short.yaml"
    spec.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: short\ntarget: {type: sim}\n"
                    "resources: {hosts: 2, processes_per_host: 1}\nprogram: {command: [sh, -c, 'sleep 3; echo done']}\n")
    shown = on_a_terminal(["submit", str(spec)], rows, cols)
    assert "mpirun_kit: [0s] sim: bringing up 2 host(s)" in shown, shown
    assert "host(s) finished; running: algo-1, algo-2" in shown, shown
    assert "[0 algo-1] done" in shown and "[1 algo-2] done" in shown
