"""The per-rank wrapper under a real mpirun (Open MPI here): reports, exit codes, signal re-raise, forwarding."""
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from channel_kit import make_server, rank_env, remove_keys
from mpirun_kit.plan.contract import RUN_NONCE_VAR, rank_identity
from mpirun_kit.rank.wrapper import apply_pinning, child_env

pytestmark = [pytest.mark.timeout(120), pytest.mark.mpi]
BIN = Path(__file__).resolve().parents[1] / "bin"
PY = sys.executable


def mpirun(server, n, program, **kw):
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    # key files for the n ranks started only: the server knows 4, and a wrapper waits 10 s for the key files of
    # its host's ranks that never start (each test took 10 s more, saying so on stderr)
    env = {**os.environ, "MPIRUN_KIT_HOSTS": f"hostx:{n}", **rank_env(server, range(n))}
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "-x", "MPIRUN_KIT_RESULT_ADDR",
            "-x", "MPIRUN_KIT_HOSTS", "-x", RUN_NONCE_VAR, PY, "-m", "mpirun_kit.rank", "--", *program]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90, **kw)


@pytest.fixture
def server():
    s = make_server({r: "hostx" for r in range(4)})
    yield s
    s.close()
    remove_keys(s)


def test_identity_and_env():
    env = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
           "MPIRUN_KIT_HOSTS": "algo-1:2,algo-2:2", "SM_HOSTS": "[]", "SM_CURRENT_HOST": "algo-1"}
    assert rank_identity(env) == (3, "algo-2", 1, 4)
    out = child_env(env)
    assert (out["RANK"], out["LOCAL_RANK"], out["WORLD_SIZE"], out["LOCAL_WORLD_SIZE"], out["SM_CURRENT_HOST"]) == \
        ("3", "1", "4", "2", "algo-2")
    assert child_env({**env, "RANK": "9"})["RANK"] == "9"  # the user's value wins


def test_program_never_holds_a_channel_key(server, tmp_path):
    """Issue 23: the key was in the wrapper's environment, which the program read from /proc/$PPID/environ.
    Now the wrapper takes it from its key file, which is gone before the program starts; neither the program's
    environment nor its parent's holds a key, yet the wrapper reports with it."""
    from mpirun_kit.exec.channel.keys import KEY_DIR_PREFIX, key_base

    seen = tmp_path / "seen"
    prog = ("import os, sys, glob\n"
            "envs = open('/proc/self/environ', 'rb').read() + open(f'/proc/{os.getppid()}/environ', 'rb').read()\n"
            "files = glob.glob(sys.argv[1] + '*/rank-0.key')\n"
            "open(sys.argv[2], 'wb').write(envs + repr(files).encode())\n")
    res = mpirun(server, 1, [PY, "-c", prog, os.path.join(key_base(), KEY_DIR_PREFIX + server.run_nonce.hex()),
                             str(seen)])
    assert res.returncode == 0, res.stderr
    key, got = server.rank_key(0).hex(), seen.read_bytes()
    assert key.encode() not in got.lower() and got.endswith(b"[]")   # no key in either environment, no key file
    assert server.wait_rank_events(lambda evs: len(evs) == 2, 10)  # yet the wrapper reported with it


def test_pinning_hook(tmp_path):
    env = {"MPIRUN_KIT_PINNING": "auto"}
    assert apply_pinning({"MPIRUN_KIT_PINNING": "none"}, dev=str(tmp_path)) == ({"MPIRUN_KIT_PINNING": "none"}, "off")
    assert apply_pinning(env, dev=str(tmp_path)) == (env, "no GPU driver")
    (tmp_path / "nvidiactl").touch()
    # With a driver the hook runs; outside a launcher (no local rank) it adds nothing.
    assert apply_pinning(env, dev=str(tmp_path)) == (env, "applied")


def test_success_reports_start_and_exit(server):
    res = mpirun(server, 2, [PY, "-c", "print('ok')"])
    assert res.returncode == 0, res.stderr
    assert server.wait_rank_events(lambda evs: len(evs) == 4, 10)
    evs = server.rank_events()
    assert sorted((e["event"], e["rank"], e["host"]) for e in evs) == [
        ("exit", 0, "hostx"), ("exit", 1, "hostx"), ("start", 0, "hostx"), ("start", 1, "hostx")]
    assert server.rank_failures() == ()


def test_start_reported_after_the_program_started(server):
    """Issue 14: the wrapper starts the program first and reports after, so the report never delays it."""
    res = mpirun(server, 1, [PY, "-c", "import os; print('PID', os.getpid())"])
    assert res.returncode == 0, res.stderr
    assert server.wait_rank_events(lambda evs: len(evs) == 2, 10)
    start = next(e for e in server.rank_events() if e["event"] == "start")
    assert f"PID {start['program_pid']}" in res.stdout, (start, res.stdout)
    assert start["pid"] != start["program_pid"]


def test_reports_carry_the_launch_account(server):
    """Issue 41: each wrapper says when its parent (here mpirun) and it started, when it had its key, the CPU it
    spent before its program started, and, at exit, when its channel connection was greeted and its whole CPU:
    the launch's account in the timeline (observe/timeline.py).  Each is read from /proc or the wrapper's own
    clock, so they come in the order they happen."""
    res = mpirun(server, 2, [PY, "-c", "pass"])
    assert res.returncode == 0, res.stderr
    assert server.wait_rank_events(lambda evs: len(evs) == 4, 10)
    for rank in (0, 1):
        start, end = (next(e for e in server.rank_events() if e["event"] == k and e["rank"] == rank)
                      for k in ("start", "exit"))
        tick = 0.011      # /proc's process start times come in 10 ms ticks
        assert start["parent_t"] - tick <= start["proc_t"] <= start["key_t"] + tick, start
        assert start["key_t"] <= start["t"] <= end["hello_t"] <= end["t"], (start, end)
        assert 0 < start["cpu_s"] <= end["cpu_s"], (start, end)


def test_the_rest_of_the_start_up_runs_while_the_siblings_take_their_keys():
    """Issue 41: a wrapper imports the channel link, the process runner and the relay only once its key is taken,
    while its host's other ranks take theirs (the wait every program of the host waits on), not before.  Its own
    key file is gone by then, a sibling's still there; its program still starts only once that one is gone."""
    from mpirun_kit.exec.channel.keys import take_rank_key
    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
    from mpirun_kit.rank.wrapper import channel_link

    server = make_server({0: "hostx", 1: "hostx"})
    env = rank_env(server)
    (directory,) = server.test_key_dirs
    seen = {}

    def meanwhile():
        seen["files"] = sorted(os.listdir(directory))
        seen["sibling"] = take_rank_key(server.run_nonce.hex(), "hostx", 1, Deadline(SYSTEM_CLOCK, 5))

    try:
        link, why = channel_link(env, 0, "hostx", wait_s=5, meanwhile=meanwhile)
        assert why == "" and link is not None
        assert seen["files"] == ["rank-1.key"] and seen["sibling"] is not None
        assert os.listdir(directory) == []
        link.close()
    finally:
        server.close()
        remove_keys(server)
    # and what a wrapper imports before it takes its key holds none of them
    probe = ("import sys, mpirun_kit.rank.wrapper\n"
             "print(sorted(m for m in ('subprocess', 'mpirun_kit.exec.command', 'mpirun_kit.observe.relay', "
             "'mpirun_kit.exec.channel.rank_link', 'dataclasses', 'typing', 'shutil') if m in sys.modules))")
    res = subprocess.run([PY, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "[]", res.stdout + res.stderr


def test_exit_code_passes_through(server):
    res = mpirun(server, 2, [PY, str(BIN / "exit_with.py"), "3", "1"])
    assert res.returncode == 3
    assert server.wait_rank_events(lambda evs: any(e.get("exit_code") == 3 for e in evs), 10)
    root = min(server.rank_failures(), key=lambda f: f.first_seen)
    assert (root.rank, root.host, root.exit_code, root.signal) == (1, "hostx", 3, None)


def test_signal_reported_by_name_and_reraised(server):
    res = mpirun(server, 2, [PY, str(BIN / "kill_self.py"), "SIGKILL", "0"])
    assert res.returncode != 0
    assert server.wait_rank_events(lambda evs: any(e.get("signal") == "SIGKILL" for e in evs), 10)
    root = min(server.rank_failures(), key=lambda f: f.first_seen)
    assert (root.rank, root.signal, root.exit_code) == (0, "SIGKILL", None)
    # the wrapper died the same way, so mpirun's own message names signal 9 too
    assert "signal 9" in res.stdout + res.stderr


def test_wrapper_forwards_sigterm_and_reraises(tmp_path):
    p = subprocess.Popen([PY, "-m", "mpirun_kit.rank", "--", PY, str(BIN / "sleep_forever.py"), str(tmp_path)],
                         env={**os.environ, "RANK": "0"}, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "rank 0 ready"
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 143  # the child exited 143 after handling SIGTERM
    assert (tmp_path / "sigterm.0").read_text() == "rank 0 got SIGTERM\n"


def test_usage():
    res = subprocess.run([PY, "-m", "mpirun_kit.rank"], capture_output=True, text=True)
    assert (res.returncode, res.stderr.strip()) == (2, "usage: python -m mpirun_kit.rank -- PROGRAM [ARGS...]")


def test_channel_link_needs_a_key_file_and_says_why_not(tmp_path):
    """No key file for a rank (its host's entrypoint never handed one out) means no reports, and a line saying
    so; a host the master did not list as keyed is not waited for at all."""
    from mpirun_kit.rank.wrapper import channel_link

    env = {"MPIRUN_KIT_RESULT_ADDR": "127.0.0.1:1", RUN_NONCE_VAR: "ab" * 16}
    assert channel_link({}, 0, "h") == (None, "")
    assert channel_link({**env, RUN_NONCE_VAR: "zz"}, 0, "h") == (
        None, "MPIRUN_KIT_RUN_NONCE is missing or not 32 hex digits: no reports to the master")
    link, why = channel_link({**env, RUN_NONCE_VAR: "ab" * 16 + "@algo-1"}, 0, "algo-2")
    assert (link, why) == (None, "no entrypoint on algo-2 handed out keys before mpirun started: no reports to "
                                 "the master")
    link, why = channel_link(env, 0, "algo-9", wait_s=0)
    assert (link, why) == (None, f"no key file for rank 0 of run {'ab' * 16} on algo-9 within 0 s (a 0700 directory "
                                 "of this uid, written by this host's entrypoint): no reports to the master")
