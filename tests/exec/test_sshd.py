"""Worker sshd: the argv as a value, and a real sshd started on 127.0.0.1 with a throwaway host key."""
import shutil
import socket
import subprocess

import pytest

from mpirun_kit.errors import ClusterError
from mpirun_kit.exec.ssh import banner_probe
from mpirun_kit.exec.sshd import sshd_argv, start_sshd

pytestmark = pytest.mark.timeout(60)


def test_argv_is_key_only():
    assert sshd_argv("/usr/sbin/sshd", 2222, "/etc/x/sshd_config") == [
        "/usr/sbin/sshd", "-D", "-e", "-p", "2222", "-f", "/etc/x/sshd_config",
        "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no", "-o", "PubkeyAuthentication=yes",
        "-o", "PermitRootLogin=prohibit-password", "-o", "MaxStartups=200"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sshd_config(tmp_path):
    if shutil.which("sshd") is None and not shutil.which("/usr/sbin/sshd"):
        pytest.skip("openssh-server not installed")
    key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cfg = tmp_path / "sshd_config"
    cfg.write_text(f"ListenAddress 127.0.0.1\nHostKey {key}\nPidFile {tmp_path / 'sshd.pid'}\nUsePAM no\n")
    return cfg


def test_start_real_sshd_then_reuse(sshd_config):
    port = free_port()
    proc = start_sshd(port, str(sshd_config))
    try:
        assert proc is not None and proc.poll() is None
        assert banner_probe("127.0.0.1", port, 2.0) is None
        # Something already answers on the port: nothing new is started.
        assert start_sshd(port, str(sshd_config)) is None
    finally:
        proc.terminate()
        proc.wait(10)


def test_sshd_that_cannot_start(tmp_path, sshd_config):
    bad = tmp_path / "bad_config"
    bad.write_text("ListenAddress 127.0.0.1\nHostKey /nonexistent/key\nNoSuchOption yes\n")
    with pytest.raises(ClusterError) as e:
        start_sshd(free_port(), str(bad))
    msg = str(e.value)
    assert msg.startswith("sshd exited with code 255 at start (")
    assert msg.endswith("fix the sshd config or host keys (ssh-keygen -A), or pass --no-sshd")
