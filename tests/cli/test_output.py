"""The tool's own lines (issue 16, defect 5): one format, warnings and errors by default,
-v / -vv for more, -q for only the result, and a live status line on waits that names what
it waits for and the last error seen -- drawn only on a terminal."""
from __future__ import annotations

import io
import logging

import pytest

from mpirun_kit.core import verbosity
from mpirun_kit.targets import base

from clock_kit import FakeClock


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def chatty(monkeypatch):
    """`validate` replaced by a command that logs at every level, waits with a status line and prints a result."""
    from mpirun_kit.cli import validate

    def talk(args) -> int:
        log = logging.getLogger("mpirun_kit.example")
        log.debug("detail")
        log.info("progress")
        log.warning("careful")
        p = base.StatusLine(clock=FakeClock(), level=args.verbosity)   # the level cli/main.py passes down
        p.update("waiting for sshd on algo-2")
        p.note("sshd up on algo-2")
        p.done("retrying after a failure")
        print("RESULT")
        return 0
    monkeypatch.setattr(validate, "_validate", talk)


def test_default_prints_warnings_and_the_result_only(cli, chatty):
    r = cli("validate", "x")
    assert (r.rc, r.out) == (0, "RESULT\n")
    # not a terminal: no status line; no info or debug lines
    assert r.err == "mpirun_kit: warning: careful\nmpirun_kit: retrying after a failure (at 0.0s)\n"


def test_v_adds_progress_and_vv_debug_lines_with_their_module(cli, chatty):
    assert cli("validate", "x", "-v").err == (
        "mpirun_kit: progress\nmpirun_kit: warning: careful\nmpirun_kit: [0s] waiting for sshd on algo-2\n"
        "mpirun_kit: sshd up on algo-2 (at 0.0s)\nmpirun_kit: retrying after a failure (at 0.0s)\n")
    assert cli("-vv", "validate", "x").err.startswith(
        "mpirun_kit: debug: mpirun_kit.example: detail\nmpirun_kit: progress\n")


def test_q_prints_only_the_result(cli, chatty):
    r = cli("-q", "validate", "x")
    assert (r.rc, r.out, r.err) == (0, "RESULT\n", "")


def test_library_default_is_unchanged_after_a_command(cli, chatty):
    """The CLI's choice lasts one command: library callers (and other tests) keep every line."""
    handlers = list(logging.getLogger().handlers)
    cli("-q", "validate", "x")
    assert base.StatusLine().level == verbosity.VERBOSE
    assert base.SubmitOptions().verbosity == verbosity.VERBOSE
    assert logging.getLogger().handlers == handlers


def test_the_output_level_is_a_value_passed_down_not_a_global():
    """Issue #31: no module holds the output level.  core/verbosity.py has only its constants and functions,
    and nothing in mpirun_kit/ reads or sets ``verbosity.LEVEL`` (it did: cli/main.py set it per command,
    the targets, the entrypoint and exec/process.py read it)."""
    import inspect
    import re
    import types
    from pathlib import Path

    import mpirun_kit

    mutable = {name: value for name, value in vars(verbosity).items()
               if not name.startswith("__") and name not in ("annotations",)
               and not isinstance(value, (types.FunctionType, types.ModuleType, int, str))}
    assert mutable == {}, f"core/verbosity.py keeps state: {mutable}"
    assert not hasattr(verbosity, "LEVEL")
    assert set(n for n, v in vars(verbosity).items() if isinstance(v, int) and not n.startswith("_")) == \
        {"QUIET", "DEFAULT", "VERBOSE"}
    assert inspect.isfunction(verbosity.entrypoint_flags)
    root = Path(mpirun_kit.__file__).parent
    readers = [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
               for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"\bverbosity\.LEVEL\b", line)]
    assert readers == []


def screen(raw: str, width: int = 10_000) -> list[str]:
    """What a terminal ``width`` columns wide shows after ``raw``: CR, LF, erase-to-end (ESC[K) and cursor-up
    (ESC[A) applied, lines longer than ``width`` wrapped; trailing blanks dropped."""
    rows, row, col = [[]], 0, 0
    i = 0
    while i < len(raw):
        c = raw[i]
        if raw.startswith("\x1b[K", i):
            del rows[row][col:]
            i += 3
            continue
        if raw.startswith("\x1b[A", i):
            row = max(row - 1, 0)
            i += 3
            continue
        if c == "\r":
            col = 0
        elif c == "\n":
            row, col = row + 1, 0
        else:
            if col == width:
                row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
            line = rows[row]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = c
            col += 1
        while len(rows) <= row:
            rows.append([])
        i += 1
    return ["".join(r).rstrip() for r in rows]


def test_status_line_is_redrawn_in_place_on_a_terminal():
    tty, clock = Tty(), FakeClock()
    p = base.StatusLine(stream=tty, clock=clock, level=verbosity.DEFAULT)
    p.update("ssh: waiting for root@algo-2:22: Connection refused")
    assert screen(tty.getvalue()) == ["mpirun_kit: [0s] ssh: waiting for root@algo-2:22: Connection refused"]
    clock.sleep(3)
    p.update("ssh: waiting for root@algo-2:22: timed out")
    assert screen(tty.getvalue()) == ["mpirun_kit: [3s] ssh: waiting for root@algo-2:22: timed out"]
    p.done("ssh: all 2 host(s) ready")
    assert screen(tty.getvalue()) == ["mpirun_kit: ssh: all 2 host(s) ready (at 3.0s)", ""]


def drain(fd: int, stream) -> str:
    """Everything written to ``stream`` so far, read from the pseudo-terminal's other side ``fd``: the terminal
    passes bytes on asynchronously, so a marker written last tells when all of them have arrived."""
    import os
    import select

    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

    mark = "<end of writes>"
    stream.write(mark)
    stream.flush()
    raw, deadline = "", Deadline(SYSTEM_CLOCK, 30)
    while not raw.endswith(mark):
        assert not deadline.expired(), f"the terminal passed on only {raw!r}"
        if select.select([fd], [], [], 0.5)[0]:
            raw += os.read(fd, 65536).decode()
    return raw[:-len(mark)]


def test_status_line_fits_the_terminal_through_tqdm():
    """On a real terminal (a pseudo-terminal 40 columns wide) the live line is tqdm's: cut to the width, so a
    redraw erases all of it.  The hand-written line wrote it whole: it wrapped, and the redraw erased only
    the last row, leaving the first one on screen."""
    import fcntl
    import os
    import struct
    import termios

    ours, theirs = os.openpty()
    fcntl.ioctl(theirs, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
    attrs = termios.tcgetattr(theirs)
    attrs[1] &= ~termios.ONLCR      # the terminal's bytes as written (no LF -> CRLF)
    termios.tcsetattr(theirs, termios.TCSANOW, attrs)
    clock = FakeClock()
    with os.fdopen(theirs, "w") as stream:
        assert stream.isatty()
        p = base.StatusLine(stream=stream, clock=clock, level=verbosity.DEFAULT)
        p.update("ssh: waiting for ubuntu@algo-12.cluster.internal:2222 (attempt 3): [Errno 111] Connection refused")
        clock.sleep(2)
        p.update("ssh: 15/16 host(s) up")
        raw = drain(ours, stream)
        assert screen(raw, width=40) == ["mpirun_kit: [2s] ssh: 15/16 host(s) up"]
        p.done("ssh: all 16 host(s) ready")
        raw += drain(ours, stream)
    os.close(ours)
    # the live line erased; the outcome stays, whole (wrapped by the terminal: it is not redrawn)
    assert screen(raw, width=40) == ["mpirun_kit: ssh: all 16 host(s) ready (a", "t 2.0s)", ""]


def test_ssh_wait_names_the_host_and_the_last_error():
    """While a host refuses connections the status line says which and why (it said nothing for minutes)."""
    from mpirun_kit.targets.ssh import SshRequest, connect_all

    tries = {"algo-1": 0, "algo-2": 0}

    def connect(req, host):
        tries[host] += 1
        if host == "algo-2" and tries[host] < 4:
            raise ConnectionRefusedError(111, "Connection refused")
        return object()
    tty, clock = Tty(), FakeClock()
    req = SshRequest(hosts=[{"name": "algo-1"}, {"name": "algo-2"}], user="ubuntu", port=2222, identity_file=None,
                     known_hosts="~/.ssh/known_hosts", connect_timeout_s=10, python="python", ready_timeout_s=60,
                     deadline_s=600, grace_s=10, workdir="/tmp/w", commands={}, preflight=[], ship={}, cancel={},
                     failure_file="/tmp/w/algo-1/output/failure", fetch_failure={})
    clients = connect_all(req, connect=connect, clock=clock, progress=base.StatusLine(stream=tty, clock=clock,
                                                                                        level=verbosity.DEFAULT))
    assert set(clients) == {"algo-1", "algo-2"}
    assert ("/2 host(s) ready; waiting for ubuntu@algo-2:2222 (attempt 3): [Errno 111] Connection refused"
            in tty.getvalue())
