"""entrypoint/common.py: what master and worker share: the result and failure files, the workers' channel key
from the job secret, and the job's result port.

Files in a temporary opt_ml, real secrets (``mpirun_kit keys new``'s format: 32 bytes of hex); whole jobs
writing and reading these are tested in test_master.py, test_local_worker.py and test_two_jobs_at_once.py.
"""
from __future__ import annotations

import logging
import secrets
import stat

import pytest

from mpirun_kit.entrypoint import common
from mpirun_kit.errors import SpecError
from mpirun_kit.exec.result import JobResult, read_result_file, result_from_failure


def test_a_success_writes_the_result_and_no_failure_file(tmp_path):
    assert common.write_result(tmp_path, JobResult(exit_code=0, cause="succeeded")) is None
    assert read_result_file(common.result_path(tmp_path)).exit_code == 0
    assert not common.failure_path(tmp_path).exists()


def test_a_failure_writes_both_private_the_failure_files_first_line_the_results_head(tmp_path):
    failure = common.write_failure(tmp_path, 69, "host algo-2 never answered on ssh")
    assert failure == tmp_path / "output" / "failure"
    head = result_from_failure(failure.read_text())
    assert (head["exit_code"], head["source"], head["reason"]) == (69, "launcher", "host algo-2 never answered on ssh")
    assert read_result_file(common.result_path(tmp_path)).exit_code == 69
    for p in (failure, common.result_path(tmp_path)):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600


def test_no_default_secret_is_no_key_and_a_multi_host_job_warns(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert common.channel_worker_key(None, tmp_path, multi_host=False) is None
        assert caplog.text == ""
        assert common.channel_worker_key(None, tmp_path, multi_host=True) is None
    assert "no job secret at" in caplog.text and "mpirun-keys" in caplog.text


def test_an_explicit_secret_file_must_be_there(tmp_path):
    with pytest.raises(SpecError, match=r"^--secret-file .*/nope: cannot read the job secret \(No such file or "
                                        r"directory\); pass the file written by `mpirun_kit keys new`$"):
        common.channel_worker_key(tmp_path / "nope", tmp_path, multi_host=True)


def test_the_key_is_the_jobs_own(tmp_path):
    secret = tmp_path / "input" / "data" / "mpirun-keys" / "job-secret"
    secret.parent.mkdir(parents=True)
    secret.write_text(secrets.token_hex(32) + "\n")
    secret.chmod(0o600)
    a = common.channel_worker_key(None, tmp_path, multi_host=True, job="a")
    assert a is not None and a == common.channel_worker_key(secret, tmp_path, multi_host=True, job="a")
    assert a != common.channel_worker_key(None, tmp_path, multi_host=True, job="b")


def test_the_result_port_is_every_hosts_same_and_each_jobs_own():
    hosts = ["algo-2", "algo-1"]
    port = common.job_result_port(None, hosts, "j")
    assert port == common.job_result_port(None, list(reversed(hosts)), "j")        # the same on every host
    assert common.JOB_PORT_BASE <= port < common.JOB_PORT_BASE + common.JOB_PORT_SPAN < 32768
    ports = {common.job_result_port(secrets.token_bytes(32), hosts, "j") for _ in range(20)}
    assert len(ports) > 1                                                          # a secret per run: another port


def test_the_session_dir_is_named_by_the_run_and_removed_whole_when_ours(tmp_path):
    """The base is this run's alone (named by its nonce), so once the launcher has ended, everything in it goes:
    a killed or aborted mpirun leaves its ompi.HOST.UID/pid.N tree behind, and the clean-clone suite left 41 such
    bases in /tmp when only an empty one was removed.  Never through a link, never another user's directory."""
    import os

    assert common.session_dir("ab" * 16) == "/tmp/mpirun_kit-" + "ab" * 8
    left = tmp_path / "s"
    (left / "ompi.algo-1.0" / "pid.17" / "0").mkdir(parents=True)
    (left / "ompi.algo-1.0" / "pid.17" / "contact.txt").write_text("x")
    common.remove_session_dir(str(left))
    assert not left.exists()
    common.remove_session_dir(None)
    common.remove_session_dir(str(tmp_path / "never-made"))
    # a link in its place: the link may go, what it points at stays
    kept = tmp_path / "kept"
    (kept / "inside").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(kept)
    common.remove_session_dir(str(link))
    assert (kept / "inside").is_dir()
    if os.geteuid() == 0:   # another user's directory of that name is not ours to empty
        theirs = tmp_path / "theirs"
        (theirs / "inside").mkdir(parents=True)
        os.chown(theirs, 65534, 65534)
        common.remove_session_dir(str(theirs))
        assert (theirs / "inside").is_dir()
