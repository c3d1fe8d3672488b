"""observe/ptracer.py: under Yama's ptrace_scope 1 the rank wrapper's stack readers (its children, the program's
siblings) may trace the program only if the program named the wrapper its tracer (PR_SET_PTRACER) before exec.

The Yama test changes /proc/sys/kernel/yama/ptrace_scope to 1 for its duration (restored after) and runs as
nobody: root has CAP_SYS_PTRACE, which Yama lets through.  Where the kernel has no Yama it skips: nothing
restricts ptrace to ancestors there.  The rest runs anywhere, with real processes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpirun_kit.observe import ptracer

REPO = Path(__file__).resolve().parents[2]
YAMA = Path(ptracer.YAMA_SCOPE)
SYSTEM_PYTHON = "/usr/bin/python3"


def test_only_scope_1_starts_the_program_through_the_helper():
    prog = ["sleep", "1"]
    assert ptracer.argv(prog, 123, None) == prog            # no Yama
    assert ptracer.argv(prog, 123, 0) == prog
    assert ptracer.argv(prog, 123, 2) == prog               # admin only: no declaration helps
    assert ptracer.argv(prog, 123, 1) == [sys.executable, "-I", "-S", str(REPO / "mpirun_kit/observe/ptracer.py"),
                                          "123", "--", "sleep", "1"]
    with pytest.raises(FileNotFoundError, match="no-such-program"):
        ptracer.argv(["no-such-program"], 123, 1, path="/usr/bin")


def test_the_helper_execs_the_program_itself_with_its_fds_and_argv():
    """The pid the wrapper holds (relay reads, signals, the start report) is the program's, and the progress pipe
    reaches it: the helper execs, it never spawns.  (Without Yama its prctl is refused; the program runs all the
    same.)"""
    r, w = os.pipe()
    say = "import os, sys; os.write(int(sys.argv[1]), f'{os.getpid()} {sys.argv[2]}'.encode())"
    proc = subprocess.Popen(ptracer.argv([sys.executable, "-c", say, str(w), "a b"], os.getpid(), 1), pass_fds=(w,))
    os.close(w)
    assert proc.wait(timeout=30) == 0
    with os.fdopen(r) as f:
        assert f.read() == f"{proc.pid} a b"


@pytest.mark.skipif(not YAMA.exists(), reason="this kernel has no Yama LSM (no /proc/sys/kernel/yama/ptrace_scope): "
                                              "ptrace is not limited to ancestors here, so there is nothing to show")
@pytest.mark.skipif(os.geteuid() != 0, reason="setting ptrace_scope and running as nobody need root")
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"no {SYSTEM_PYTHON} for nobody to run")
def test_under_ptrace_scope_1_a_sibling_reads_the_programs_stack_only_through_the_helper(tmp_path):
    """As nobody, a stand-in for the wrapper starts `sleep` twice, once through ptracer.argv, and reads each
    one's stack with observe/stacks.native_threads (eu-stack or gdb: children of the stand-in, as in the relay)."""
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""\
        import os, subprocess, sys, time
        sys.path.insert(0, {str(REPO)!r})
        from mpirun_kit.observe import ptracer, stacks
        got = {{}}
        for name, scope in (("plain", 0), ("helped", 1)):
            p = subprocess.Popen(ptracer.argv(["sleep", "60"], os.getpid(), scope))
            end = time.monotonic() + 20
            while open(f"/proc/{{p.pid}}/comm").read().strip() != "sleep" and time.monotonic() < end:
                time.sleep(0.05)
            threads, why, how = stacks.native_threads(p.pid, os.environ.get("PATH", ""))
            got[name] = (bool(threads), how, why)
            p.kill()
            p.wait()
        print(got)
        """))
    os.chmod(tmp_path, 0o755)
    driver.chmod(0o644)
    old = YAMA.read_text()
    try:
        YAMA.write_text("1")
    except OSError as exc:   # a container's read-only /proc/sys
        pytest.skip(f"cannot set {YAMA} here ({exc.strerror})")
    try:
        # The system's python: a venv's may lead into root's home, which nobody cannot enter (stdlib is enough).
        r = subprocess.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", SYSTEM_PYTHON,
                            "-I", str(driver)], capture_output=True, text=True, timeout=120, cwd="/")
    finally:
        YAMA.write_text(old)
    assert r.returncode == 0, r.stderr
    got = eval(r.stdout.strip())   # noqa: S307 - our own driver's repr of a dict of tuples
    assert got["plain"][0] is False, got                      # a sibling may not trace it: the failure shown
    assert got["helped"][0] is True and got["helped"][1] in ("eu-stack", "gdb"), got
