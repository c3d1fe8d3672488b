"""Issue 27, findings 3 and 5, against real wrappers under a real mpirun: another user of the host (uid
``nobody``) plants what it can in /dev/shm, and a rank's own program goes after a sibling wrapper's key.

Each test runs the same way on the tree before the fix (the attacker and the key writer try both key-file
layouts), so each shows the attack that worked there: there the first hung (a FIFO swapped in for rank 1's key
file blocked its wrapper) and the second read rank 1's key from its wrapper's memory.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from channel_kit import make_server, rank_env, remove_keys
from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.exec.channel.keys import host_tag, take_rank_key
from mpirun_kit.plan.contract import RESULT_ADDR_VAR, RUN_NONCE_VAR

pytestmark = [pytest.mark.timeout(180), pytest.mark.mpi]
PY = sys.executable
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
REPO = Path(__file__).resolve().parents[2]
#: the interpreter uid nobody runs: the system's, with this checkout on its path (the venv's interpreter may
#: live under /root, which is closed to other users; the wrapper needs only the stdlib).
NOBODY_PY = "/usr/bin/python3"


def needs_root_and_mpirun():
    if (os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("mpirun") is None
            or not os.access(NOBODY_PY, os.X_OK)):
        pytest.skip("needs root, setpriv and mpirun to act as another user")


def key_base() -> str:
    """Where both layouts keep key files (exec/channel/keys.py)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else "/tmp"


# Another user on the host: plants today's layout (exec/channel/keys.py: base/mpirun_kit-keys-NONCE-HOSTTAG-PID-
# TOKEN/rank-N.key, the name every part of which it can derive or choose) before the job: a 0777 directory of its
# own holding a FIFO for rank 0, a symlink for rank 1's key and a well-formed fake key for rank 1 (were it taken,
# rank 1 would sign with a key the master does not know and its reports would be lost); then swaps a FIFO in
# for rank 1's key file wherever it can reach one, for as long as the job may run.
PLANTER = r"""
import os, sys, time
base, nonce, tag = sys.argv[1], sys.argv[2], sys.argv[4]
prefix = f"mpirun_kit-keys-{nonce}-{tag}-"
planted = os.path.join(base, prefix + "1-" + "0" * 32)
os.mkdir(planted)
os.chmod(planted, 0o777)
os.mkfifo(os.path.join(planted, "rank-0.key"), 0o666)
os.symlink("/etc/hostname", os.path.join(planted, "rank-1.key"))
fake = os.path.join(base, prefix + "2-" + "1" * 32)
os.mkdir(fake, 0o700)
fd = os.open(os.path.join(fake, "rank-1.key"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, ("ab" * 32 + "\njob\n").encode())
os.close(fd)
print("planted", flush=True)
swapped = 0
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    for name in os.listdir(base):
        if not name.startswith(prefix) or name.endswith(("0" * 32, "1" * 32)):
            continue
        p = os.path.join(base, name, "rank-1.key")
        try:
            if os.path.isfile(p) and not os.path.islink(p):
                os.unlink(p)
                os.mkfifo(p, 0o666)
                swapped += 1
                print("swapped", p, flush=True)
        except OSError:
            pass
    time.sleep(0.002)
"""


def test_another_user_cannot_block_a_rank_through_dev_shm(tmp_path):
    needs_root_and_mpirun()
    server = make_server({0: "hostx", 1: "hostx"})
    # The host's key directory first, so the planted ones are newer: a directory listing (tmpfs: newest first)
    # shows them to the wrappers before the real one, and only the ownership check keeps them out.
    env = {**os.environ, "MPIRUN_KIT_HOSTS": "hostx:2", **rank_env(server)}
    planter = subprocess.Popen(NOBODY + [PY, "-c", PLANTER, key_base(), server.run_nonce.hex(), "40",
                                         host_tag("hostx")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert planter.stdout.readline().strip() == "planted"
        time.sleep(0.3)                      # the attacker has had its chance at the files before mpirun starts
        argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", RESULT_ADDR_VAR,
                "-x", "MPIRUN_KIT_HOSTS", "-x", RUN_NONCE_VAR, PY, "-m", "mpirun_kit.rank", "--", PY, "-c", "print(1)"]
        try:
            res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the job hung: a wrapper blocked on what another user planted for its key file")
        assert res.returncode == 0, res.stderr
        assert server.wait_rank_events(lambda evs: len(evs) == 4, 10), (server.rank_events(), res.stderr)
        assert "no key file" not in res.stderr
    finally:
        planter.kill()
        out = planter.communicate()[0]
        server.close()
        remove_keys(server)
        for name in os.listdir(key_base()):
            if name.startswith(f"mpirun_kit-keys-{server.run_nonce.hex()}"):
                shutil.rmtree(os.path.join(key_base(), name), ignore_errors=True)
    assert "swapped" not in out, out


# Runs as uid nobody: this host's ranks' key files, by whichever layout the tree has.
KEY_WRITER = r"""
import sys
from mpirun_kit.exec.channel import keys
nonce, host, seed, job = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3]), sys.argv[4]
ranks = [int(r) for r in sys.argv[5].split(",")]
if hasattr(keys, "write_key_dir"):
    print(keys.write_key_dir(nonce, host, seed, job, ranks))
else:
    keys.write_rank_keys(keys.key_dir(nonce), host, seed, job, ranks)
    print(keys.key_dir(nonce))
"""

# Rank 0's program: find the other wrapper of this job, read its memory, look for rank 1's key (given here only
# to recognise it).  Rank 1's program just stays alive meanwhile.
READER = r"""
import os, sys, time
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
out, key = sys.argv[1], bytes.fromhex(sys.argv[2])
if rank == 1:
    time.sleep(4)
    sys.exit(0)
me = os.getppid()
result = "no sibling wrapper found"
end = time.monotonic() + 3
while time.monotonic() < end and not result.startswith(("found", "denied")):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if int(pid) == me or b"mpirun_kit.rank" not in cmd or READER_MARK.encode() not in cmd:
            continue
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
        except OSError as exc:
            result = f"denied: {exc.strerror}"
            break
        for line in maps:
            addr, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            lo, hi = (int(x, 16) for x in addr.split("-"))
            try:
                mem.seek(lo)
                chunk = mem.read(hi - lo)
            except (OSError, OverflowError):
                continue
            if key in chunk or key.hex().encode() in chunk:
                result = f"found rank 1's key in the memory of wrapper {pid}"
                break
        mem.close()
    time.sleep(0.1)
open(out, "w").write(result)
"""


@pytest.fixture
def nobody_dir():
    """A directory uid nobody can use (pytest's tmp_path is under a 0700 directory of root's)."""
    d = tempfile.mkdtemp(prefix="h4-nobody-")
    os.chmod(d, 0o777)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_a_ranks_program_cannot_read_a_sibling_wrappers_key_from_its_memory(nobody_dir):
    """The whole job runs as one user (nobody, so no CAP_SYS_PTRACE): the wrapper's PR_SET_DUMPABLE 0 keeps its
    memory from its siblings' programs.  (Root, or any CAP_SYS_PTRACE holder, reads it anyway: the job's own
    programs are inside the trust boundary, docs/threat-model.md.)"""
    needs_root_and_mpirun()
    tmp_path = nobody_dir
    server = make_server({0: "hostx", 1: "hostx"})
    seed = server.host_seed("hostx")
    wrote = subprocess.run(NOBODY + ["env", f"PYTHONPATH={REPO}", NOBODY_PY, "-c", KEY_WRITER, server.run_nonce.hex(), "hostx", seed.hex(), server.job,
                                     "0,1"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    out = tmp_path / "seen"
    prog = READER.replace("READER_MARK", repr("MEMREADER"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env.update({"MPIRUN_KIT_HOSTS": "hostx:2", RESULT_ADDR_VAR: f"127.0.0.1:{server.port}",
                RUN_NONCE_VAR: server.run_nonce.hex(), "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
                "PYTHONPATH": str(REPO)})
    argv = NOBODY + ["mpirun", "--oversubscribe", "-np", "2", "-x", RESULT_ADDR_VAR, "-x", "MPIRUN_KIT_HOSTS",
                     "-x", RUN_NONCE_VAR, "-x", "PYTHONPATH", NOBODY_PY, "-m", "mpirun_kit.rank", "--", NOBODY_PY, "-c",
                     prog, str(out),
                     server.rank_key(1).hex(), "MEMREADER"]
    try:
        res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90, cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        assert server.wait_rank_events(lambda evs: len(evs) == 4, 10), (server.rank_events(), res.stderr)
        seen = out.read_text()
    finally:
        server.close()
        subprocess.run(["rm", "-rf", wrote.stdout.strip()])
    assert seen.startswith("denied: "), seen


def test_a_program_never_starts_while_a_late_siblings_key_file_is_on_disk():
    """Issue #39, item 5: rank 1's wrapper starts after rank 0's key wait is over.  Before, rank 0 said 'starting
    anyway' and its program ran while rank-1.key was on disk, free to read it and report for rank 1.  Now rank
    0's wrapper holds its program until rank 1 took its key (or the job stops)."""
    import threading

    from mpirun_kit.rank.wrapper import channel_link

    server = make_server({0: "hostx", 1: "hostx"})
    env = rank_env(server)
    done = {}
    t = threading.Thread(target=lambda: done.update(link=channel_link(env, 0, "hostx", wait_s=0.3)), daemon=True)
    try:
        t.start()
        t.join(1.5)   # five times its key wait
        held = t.is_alive()
        got = take_rank_key(server.run_nonce.hex(), "hostx", 1, Deadline(SYSTEM_CLOCK, 5))   # rank 1, late
        t.join(10)
        assert held, "rank 0's program would have started with rank 1's key file on disk"
        assert got is not None and not t.is_alive() and done["link"][0] is not None, done
    finally:
        if done.get("link") and done["link"][0] is not None:
            done["link"][0].close()
        server.close()
        remove_keys(server)
