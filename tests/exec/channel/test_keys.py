"""The channel's keys (exec/channel/keys.py): derivations, the sealed seed, and the key directory a rank's
wrapper takes its key from, against another user of the host (uid ``nobody``) who plants what it can."""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from mpirun_kit.core.clock import Deadline
from mpirun_kit.exec.channel import keys

from clock_kit import FakeClock

NONCE = "ab" * 16


def as_nobody(code: str, *args) -> subprocess.CompletedProcess:
    """Run Python ``code`` as uid nobody (another user of this host), as an attacker would."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as another user")
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c",
                           code, *args], capture_output=True, text=True, timeout=60)


def test_derivations_differ_by_job_host_and_rank():
    secret, run = os.urandom(32), os.urandom(32)
    assert keys.worker_key_from_secret(secret, "a") != keys.worker_key_from_secret(secret, "b")
    assert keys.worker_key_without_secret(["h1", "h2"], 1, "a") != keys.worker_key_without_secret(["h1", "h2"], 1, "b")
    s1, s2 = keys.host_seed(run, "a", "h1"), keys.host_seed(run, "a", "h2")
    assert s1 != s2 and keys.host_seed(run, "b", "h1") != s1
    assert keys.rank_key(s1, "a", 0) != keys.rank_key(s1, "a", 1) != keys.rank_key(s2, "a", 1)


def test_the_seed_is_sealed_to_the_workers_key_and_the_connection():
    """Issue 27 finding 7: the seed crossed the network in clear.  Sealed, it opens only with the workers' key,
    and the same seed looks different on every connection."""
    seed, wk, run, c1, c2 = (os.urandom(32) for _ in range(5))
    sealed = keys.seal_seed(seed, wk, run[:16], c1[:16], "algo-2")
    assert sealed != seed and keys.seal_seed(sealed, wk, run[:16], c1[:16], "algo-2") == seed
    assert keys.seal_seed(sealed, os.urandom(32), run[:16], c1[:16], "algo-2") != seed
    assert keys.seal_seed(seed, wk, run[:16], c2[:16], "algo-2") != sealed


def test_key_dir_is_private_whole_taken_once_and_removed(tmp_path):
    base = str(tmp_path)
    seed = os.urandom(32)
    d = keys.write_key_dir(NONCE, "algo-1", seed, "job", [0, 1], base=base)
    assert os.path.basename(d).startswith(keys.KEY_DIR_PREFIX + NONCE + "-")
    assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700
    assert sorted(os.listdir(d)) == ["rank-0.key", "rank-1.key"]          # whole: no staging left beside it
    assert [n for n in os.listdir(base) if n != os.path.basename(d)] == []
    assert all(stat.S_IMODE(os.stat(os.path.join(d, n)).st_mode) == 0o600 for n in os.listdir(d))
    clock = FakeClock(wall=0.0, min_sleep=0.001)
    got = keys.take_rank_key(NONCE, "algo-1", 0, Deadline(clock, 0), base=base, clock=clock)
    assert got == (keys.rank_key(seed, "job", 0), "job", d)
    assert keys.take_rank_key(NONCE, "algo-1", 0, Deadline(clock, 0), base=base, clock=clock) is None  # once
    assert keys.take_rank_key(NONCE, "algo-2", 1, Deadline(clock, 0), base=base, clock=clock) is None  # by host
    assert keys.wait_siblings(d, Deadline(clock, 0.5), clock) == ["rank-1.key"]   # rank 1 never came: deadline
    keys.remove_key_dir(d)
    assert os.listdir(base) == []                                           # rank 1's unread file went too


def test_a_malformed_or_missing_key_file_means_no_reports_at_the_deadline(tmp_path):
    d = keys.write_key_dir(NONCE, "h", os.urandom(32), "job", [], base=str(tmp_path))
    fd = os.open(os.path.join(d, "rank-0.key"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"not hex\njob\n")
    os.close(fd)
    clock = FakeClock(wall=0.0, min_sleep=0.001)
    assert keys.take_rank_key(NONCE, "h", 0, Deadline(clock, 0), base=str(tmp_path), clock=clock) is None
    assert keys.take_rank_key(NONCE, "h", 5, Deadline(clock, 1.0), base=str(tmp_path), clock=clock) is None
    assert clock.now >= 1.0                                                   # waited its deadline (injected clock)


def test_a_fifo_or_symlink_in_place_of_a_key_file_is_refused_without_blocking(tmp_path):
    """Issue 27 finding 3: a FIFO in place of rank-1.key blocked the wrapper's open() past its limit, and the
    entrypoint followed a symlink.  Opened O_NOFOLLOW | O_NONBLOCK and checked with fstat, neither is read,
    and the wait ends at its deadline (the injected clock: a blocking open would hang this test)."""
    d = keys.write_key_dir(NONCE, "h", os.urandom(32), "job", [], base=str(tmp_path))
    os.mkfifo(os.path.join(d, "rank-1.key"), 0o600)
    target = tmp_path / "elsewhere"
    target.write_text("00" * 32 + "\njob\n")
    os.chmod(target, 0o600)
    os.symlink(target, os.path.join(d, "rank-2.key"))
    clock = FakeClock(wall=0.0, min_sleep=0.001)
    for rank in (1, 2):
        assert keys.take_rank_key(NONCE, "h", rank, Deadline(clock, 0.2), base=str(tmp_path), clock=clock) is None
    assert target.exists()


def test_stale_key_dirs_of_dead_runs_are_swept(tmp_path):
    live = keys.write_key_dir(NONCE, "h", os.urandom(32), "job", [0], base=str(tmp_path))
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout.strip()
    stale = tmp_path / f"{keys.KEY_DIR_PREFIX}{'cd' * 16}-{keys.host_tag('h')}-{dead_pid}-{'0' * 32}"
    stale.mkdir(mode=0o700)
    (stale / "rank-0.key").write_text("x")
    assert keys.sweep_stale(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and os.path.exists(live)                      # a live writer's stays


@pytest.fixture
def shared_base():
    """A world-writable sticky directory like /dev/shm (inside it, so no other test's runs are touched)."""
    base = tempfile.mkdtemp(prefix="h4-keys-", dir=keys.key_base())
    os.chmod(base, 0o1777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_another_user_cannot_plant_block_or_redirect_the_key_dir(shared_base):
    """Issue 27 finding 3, as uid nobody: every name derivable from what the network carries (the run nonce is
    in every greeting) made first, holding a FIFO and a symlink as rank-1.key.  Then root's entrypoint makes
    the directory: it is its own, under a name nobody made, and the wrapper's wait skips what was planted."""
    base = shared_base
    planted = as_nobody(r"""
import os, sys
base, nonce, tag = sys.argv[1:4]
for name in (f"mpirun_kit-keys-{nonce}", f"mpirun_kit-keys-{nonce}-{tag}-1-" + "0" * 32):
    d = os.path.join(base, name)
    os.mkdir(d, 0o700)
    os.mkfifo(os.path.join(d, "rank-1.key"), 0o600)
    os.symlink("/etc/shadow", os.path.join(d, "rank-2.key"))
print("planted")
""", base, NONCE, keys.host_tag("algo-1"))
    assert planted.stdout.strip() == "planted", planted.stderr
    seed = os.urandom(32)
    d = keys.write_key_dir(NONCE, "algo-1", seed, "job", [1, 2], base=base)
    assert os.lstat(d).st_uid == os.geteuid()
    clock = FakeClock(wall=0.0, min_sleep=0.001)
    got = keys.take_rank_key(NONCE, "algo-1", 1, Deadline(clock, 1.0), base=base, clock=clock)
    assert got == (keys.rank_key(seed, "job", 1), "job", d)
    got = keys.take_rank_key(NONCE, "algo-1", 2, Deadline(clock, 1.0), base=base, clock=clock)
    assert got == (keys.rank_key(seed, "job", 2), "job", d)
    # And nobody cannot reach into the real one.
    tried = as_nobody("import os, sys\ntry:\n    os.listdir(sys.argv[1]); print('listed')\n"
                      "except PermissionError:\n    print('refused')\n", d)
    assert tried.stdout.strip() == "refused"
    keys.remove_key_dir(d)
