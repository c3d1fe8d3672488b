"""exec/remote_host.py, the host side of the ssh target's commands, run here as real processes (the same argv
ssh would run there): start records its program's pid, ends as the program ends and stops it once no one reads
its output, cancel stops it by that pid (SIGTERM, grace, SIGKILL), write is atomic, read is bounded.  Over real sshd: tests/targets/test_ssh.py."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mpirun_kit.exec import remote_host

pytestmark = pytest.mark.timeout(60)


def run(*args: str, stdin: bytes | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(remote_host.argv(sys.executable, *args), input=stdin, capture_output=True, timeout=30, **kw)


def wait_for(path, timeout=10.0):
    end = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.02)
    assert path.exists()


def test_write_is_atomic_makes_parents_and_keeps_bytes(tmp_path):
    target = tmp_path / "a b" / "launch-spec.json"
    r = run("write", str(target), stdin=b'{"x": "\xc3\xa9"}\n')
    assert r.returncode == 0, r.stderr
    assert target.read_bytes() == b'{"x": "\xc3\xa9"}\n'
    assert [p.name for p in target.parent.iterdir()] == ["launch-spec.json"]   # no temporary file left


def test_read_is_bounded_and_silent_when_there_is_no_file(tmp_path):
    (tmp_path / "failure").write_bytes(b"x" * 100)
    r = run("read", str(tmp_path / "failure"), "--limit", "10")
    assert (r.returncode, r.stdout) == (0, b"x" * 10)
    r = run("read", str(tmp_path / "none"), "--limit", "10")
    assert (r.returncode, r.stdout) == (0, b"")


def _start(tmp_path, script: str, *extra: str) -> tuple[subprocess.Popen, int]:
    """``remote_host start`` running ``sh -c script`` as ssh would (its stdout a pipe we read); (start, program pid)."""
    import psutil

    pid_file = tmp_path / "algo-1.pid"
    proc = subprocess.Popen(remote_host.argv(sys.executable, "start", "--pid-file", str(pid_file), "--dir",
                                             str(tmp_path / "algo-1"), *extra, "--", "sh", "-c", script),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == str(tmp_path / "algo-1")   # made and entered
    pid = int(pid_file.read_text())
    assert psutil.Process(pid).ppid() == proc.pid                       # the program, start's own child
    return proc, pid


def _end(proc: subprocess.Popen, pid: int) -> None:
    for p in (pid, proc.pid):
        try:
            os.kill(p, 9)
        except ProcessLookupError:
            pass
    proc.wait()


@pytest.mark.parametrize("ends", ["exit 3", "killed by SIGTERM"])
def test_start_records_the_programs_pid_and_ends_as_it_ends(tmp_path, ends):
    script = "pwd; while [ ! -e go ]; do sleep 0.05; done; exit 3" if ends == "exit 3" else "pwd; exec sleep 30"
    proc, pid = _start(tmp_path, script)
    try:
        if ends == "exit 3":
            (tmp_path / "algo-1" / "go").touch()
        else:
            os.kill(pid, 15)       # what the ssh target's cancel does, by the recorded pid
        # ssh reports start's exit as the program's: its code, or the same signal (exit-signal).
        assert proc.wait(timeout=20) == (3 if ends == "exit 3" else -15)
    finally:
        _end(proc, pid)


@pytest.mark.parametrize("stubborn", [False, True])
def test_start_stops_the_program_once_no_one_reads_its_output(tmp_path, stubborn):
    """The ssh channel closed (the submit died, even by SIGKILL): sshd sends nothing without a pty, so start
    stops the program as a cancel does, SIGTERM then SIGKILL after --grace (issue #28)."""
    trap = "trap '' TERM; " if stubborn else ""
    proc, pid = _start(tmp_path, f"{trap}pwd; while :; do sleep 0.05; done", "--grace", "1")
    try:
        proc.stdout.close()        # the reader goes: what sshd does when the channel closes
        assert proc.wait(timeout=20) == (-9 if stubborn else -15)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        _end(proc, pid)


@pytest.mark.parametrize("stubborn", [False, True])
def test_cancel_stops_the_recorded_process_sigterm_then_sigkill(tmp_path, stubborn):
    pid_file = tmp_path / "h.pid"
    trap = "trap '' TERM; " if stubborn else ""
    proc = subprocess.Popen(["sh", "-c", f"{trap}echo $$ > {pid_file}; while :; do sleep 0.05; done"])
    try:
        wait_for(pid_file)
        r = run("cancel", "--pid-file", str(pid_file), "--grace", "1", "--wait", "5")
        assert (r.returncode, r.stdout.decode().strip()) == (0, "gone"), r.stderr
        assert proc.wait(timeout=10) == (-9 if stubborn else -15)
    finally:
        proc.kill()


def test_cancel_without_a_pid_file_says_so_with_its_own_code(tmp_path):
    r = run("cancel", "--pid-file", str(tmp_path / "none.pid"), "--grace", "1", "--wait", "0.3")
    assert (r.returncode, r.stdout.decode().strip()) == (remote_host.NO_PID_FILE, "no-pid-file")


# --- a run directory another user could swap (the ssh target's default workdir is under /tmp) -----------------
# Real directories, chmod and chown to nobody (the tests run as root); the path through real sshd, with the
# ssh target's own wording, is tests/targets/test_ssh.py::test_ship_refuses_a_workdir_another_user_could_swap.

def _nobody() -> int:
    import pwd

    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user nobody")


def _as(path, *, uid=None, mode=None):
    path.mkdir(parents=True, exist_ok=True)
    if uid is not None:
        os.chown(path, uid, -1)
    if mode is not None:
        os.chmod(path, mode)
    return path


def _write_private(run_dir):
    return run("write", f"{run_dir}/hostfile", "--private", str(run_dir), stdin=b"a slots=1\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to nobody needs root")
@pytest.mark.parametrize("case", ["workdir_of_other", "workdir_0777", "workdir_0770", "run_dir_of_other",
                                  "above_0777", "above_of_other", "workdir_link_of_other"])
def test_write_refuses_a_run_directory_another_user_could_swap(tmp_path, case):
    """The run directory and the workdir above it: ours, writable by no one else; every directory above: ours or
    root's, not writable by others unless sticky.  Refused with exit UNSAFE_DIR and one line naming the directory
    and its owner or mode; nothing is written."""
    nobody = _nobody()
    top = _as(tmp_path / "top", mode=0o1777)        # like /tmp: others may write, sticky: fine
    wd = top / "wd"
    run_dir = wd / "r1"
    bad = {"workdir_of_other": lambda: (_as(wd, uid=nobody, mode=0o755), f"{wd} belongs to uid {nobody} (nobody), "
                                        "not to you"),
           "workdir_0777": lambda: (_as(wd, mode=0o777), f"{wd} is writable by other users (mode 777)"),
           "workdir_0770": lambda: (_as(wd, mode=0o770), f"{wd} is writable by other users (mode 770)"),
           "run_dir_of_other": lambda: (_as(run_dir, uid=nobody, mode=0o700),
                                        f"{run_dir} belongs to uid {nobody} (nobody), not to you"),
           "above_0777": lambda: (_as(top, mode=0o777), f"{top} is writable by other users (mode 777)"),
           "above_of_other": lambda: (_as(top, uid=nobody, mode=0o755),
                                      f"{top} belongs to uid {nobody} (nobody), not to you or root"),
           "workdir_link_of_other": lambda: (_link(wd, _as(tmp_path / "mine", mode=0o700), nobody),
                                             f"{wd} is a symbolic link belonging to uid {nobody} (nobody), not to "
                                             "you or root")}
    _, line = bad[case]()
    r = _write_private(run_dir)
    assert (r.returncode, r.stderr.decode()) == (remote_host.UNSAFE_DIR, f"mpirun_kit: {line}\n")
    assert not (run_dir / "hostfile").exists() and not (tmp_path / "mine" / "r1" / "hostfile").exists()
    os.chmod(top, 0o1777)


def _link(link, target, uid):
    os.symlink(target, link)
    os.lchown(link, uid, -1)
    return link


@pytest.mark.skipif(os.geteuid() != 0, reason="a sticky directory of root's above")
def test_write_makes_a_private_run_directory_under_a_sticky_shared_one(tmp_path):
    """The default workdir's case: /tmp-like (1777, root's) above, the workdir and run directory made 0700."""
    import stat

    top = _as(tmp_path / "top", mode=0o1777)
    run_dir = top / "mpirun-kit-job" / "r1"
    r = _write_private(run_dir)
    assert r.returncode == 0, r.stderr
    assert (run_dir / "hostfile").read_bytes() == b"a slots=1\n"
    assert [stat.S_IMODE(os.stat(d).st_mode) for d in (run_dir.parent, run_dir)] == [0o700, 0o700]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to nobody needs root")
def test_start_refuses_a_run_directory_another_user_could_swap(tmp_path):
    """start checks too (defence in depth: it makes the host's directory in the run directory and enters it)."""
    wd = _as(tmp_path / "wd", mode=0o777)
    r = subprocess.run(remote_host.argv(sys.executable, "start", "--pid-file", str(wd / "r1" / "a.pid"), "--dir",
                                        str(wd / "r1" / "a"), "--private", str(wd / "r1"), "--", "true"),
                       capture_output=True, timeout=30)
    assert (r.returncode, r.stderr.decode()) == (remote_host.UNSAFE_DIR,
                                                 f"mpirun_kit: {wd} is writable by other users (mode 777)\n")
    assert not (wd / "r1" / "a.pid").exists() and not (wd / "r1" / "a").exists()


# -- the verbs the Slurm target's runner uses where Slurm's clients run (issue 38 item 2) ---------------------------
def test_write_sets_the_mode_asked(tmp_path):
    r = run("write", str(tmp_path / "run" / "job-secret"), "--private", str(tmp_path / "run"), "--mode", "600",
            stdin=b"s")
    assert r.returncode == 0, r.stderr
    assert oct((tmp_path / "run" / "job-secret").stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "run").stat().st_mode & 0o777) == "0o700"


def test_read_many_is_one_line_per_path_missing_ones_a_dash(tmp_path):
    import base64

    (tmp_path / "code").write_bytes(b"3\n")
    (tmp_path / "text").write_bytes("rank 1 — exit 3\n\nx".encode())
    r = run("read-many", "--limit", "5", str(tmp_path / "code"), str(tmp_path / "none"), str(tmp_path / "text"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[1] == "-"
    assert [base64.b64decode(lines[i][1:]) for i in (0, 2)] == [b"3\n", "rank 1 — exit 3\n\nx".encode()[:5]]


def test_scrubbed_runs_the_command_without_a_slurm_sessions_variables():
    env = {"PATH": os.environ["PATH"], "SLURM_CPU_BIND": "map_cpu:0", "SBATCH_DEBUG": "1", "PMIX_RANK": "3",
           "SLURM_CONF": "/etc/slurm/slurm.conf", "KEEP": "yes"}
    r = run("scrubbed", "--", "env", env=env)
    assert r.returncode == 0, r.stderr
    seen = dict(line.split("=", 1) for line in r.stdout.decode().splitlines())
    assert (seen.get("SLURM_CONF"), seen.get("KEEP")) == ("/etc/slurm/slurm.conf", "yes")
    assert not [k for k in seen if k.startswith(("SLURM_CPU", "SBATCH_", "PMIX_"))]
    missing = run("scrubbed", "--", "no-such-program-mpirun-kit", env=env)
    assert (missing.returncode, missing.stderr.decode().strip()) == (
        127, "mpirun_kit: could not start no-such-program-mpirun-kit: No such file or directory")
