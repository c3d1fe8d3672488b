"""The channel's keys (exec/channel/keys.py): derivations, and the key file a rank's wrapper takes."""
import os
import stat

from mpirun_kit.exec.channel import keys


def test_derivations_differ_by_job_host_and_rank():
    secret, run = os.urandom(32), os.urandom(32)
    assert keys.worker_key_from_secret(secret, "a") != keys.worker_key_from_secret(secret, "b")
    assert keys.worker_key_without_secret(["h1", "h2"], 1, "a") != keys.worker_key_without_secret(["h1", "h2"], 1, "b")
    s1, s2 = keys.host_seed(run, "a", "h1"), keys.host_seed(run, "a", "h2")
    assert s1 != s2 and keys.host_seed(run, "b", "h1") != s1
    assert keys.rank_key(s1, "a", 0) != keys.rank_key(s1, "a", 1) != keys.rank_key(s2, "a", 1)


def test_key_file_written_private_taken_once_and_removed(tmp_path):
    d = str(tmp_path / "keys")
    seed = os.urandom(32)
    paths = keys.write_rank_keys(d, "algo-1", seed, "job", [0, 1])
    assert [stat.S_IMODE(os.stat(p).st_mode) for p in paths] == [0o600, 0o600]
    assert stat.S_IMODE(os.stat(os.path.join(d, "algo-1")).st_mode) == 0o700
    assert keys.take_rank_key(d, "algo-1", 0, wait_s=0) == (keys.rank_key(seed, "job", 0), "job")
    assert not os.path.exists(paths[0])
    assert keys.take_rank_key(d, "algo-1", 0, wait_s=0) is None      # taken once
    keys.remove_rank_keys(d, "algo-1")
    assert not os.path.exists(d)                                     # rank 1's unread file went too


def test_a_malformed_or_missing_key_file_means_no_reports(tmp_path):
    d = tmp_path / "keys"
    (d / "h").mkdir(parents=True)
    (d / "h" / "rank-0.key").write_text("not hex\njob\n")
    assert keys.take_rank_key(str(d), "h", 0, wait_s=0) is None
    t = [0.0]
    assert keys.take_rank_key(str(d), "h", 5, wait_s=1.0, monotonic=lambda: t[0],
                              sleep=lambda s: t.__setitem__(0, t[0] + s)) is None
    assert t[0] >= 1.0                                               # waited its deadline (injected clock)
