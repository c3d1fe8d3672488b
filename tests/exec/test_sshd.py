"""Worker sshd: the argv as a value, and a real sshd started on 127.0.0.1 with a throwaway host key."""
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from mpirun_kit.errors import ClusterError, SpecError
from mpirun_kit.exec.ssh import banner_probe
from mpirun_kit.exec.sshd import config_value, sshd_argv, start_sshd
from mpirun_kit.exec.sshkeys import HOST_KEY_PATH

pytestmark = pytest.mark.timeout(60)


def test_argv_is_key_only():
    assert sshd_argv("/usr/sbin/sshd", 2222, "/etc/x/sshd_config") == [
        "/usr/sbin/sshd", "-D", "-e", "-p", "2222", "-f", "/etc/x/sshd_config",
        "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no", "-o", "PubkeyAuthentication=yes",
        "-o", "PermitRootLogin=prohibit-password", "-o", "MaxStartups=200"]


IMAGE_SSHD_CONFIG = Path(__file__).resolve().parents[2] / "docker" / "sshd_config"


def test_the_image_config_keeps_its_own_max_startups(tmp_path):
    """docker/sshd_config sizes MaxStartups for the job; the argv must not override it (real sshd -T resolves it)."""
    text = IMAGE_SSHD_CONFIG.read_text()
    assert config_value(text, "MaxStartups") == "256:30:512"
    argv = sshd_argv("/usr/sbin/sshd", 2222, str(IMAGE_SSHD_CONFIG), text)
    assert not any(a.startswith("MaxStartups=") for a in argv)
    assert "PasswordAuthentication=no" in argv  # the security options are still forced
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        pytest.skip("openssh-server not installed")
    key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # The image's config with this test's host key and no drop-ins, so sshd -T can resolve it here.
    cfg = tmp_path / "sshd_config"
    cfg.write_text(text.replace("/etc/ssh/mpirun_kit/ssh_host_ed25519_key", str(key))
                   .replace("/etc/ssh/sshd_config.d/", f"{tmp_path}/none.d/"))
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    opts = [a for a in sshd_argv("/usr/sbin/sshd", 2222, str(cfg), cfg.read_text())[1:] if a not in ("-D", "-e")]
    resolved = subprocess.run(["/usr/sbin/sshd", "-T", *opts], capture_output=True, text=True)
    assert resolved.returncode == 0, resolved.stderr
    assert "maxstartups 256:30:512" in resolved.stdout.splitlines()
    # A config that does not set it gets mpirun_kit's default; a Match block's value is not global.
    assert sshd_argv("sshd", 22, "c", "Port 22\nMatch User x\n  MaxStartups 5\n")[-2:] == ["-o", "MaxStartups=200"]


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


def test_sshd_argv_listens_on_the_cluster_address_only(tmp_path):
    key = tmp_path / "hk"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cfg = tmp_path / "sshd_config"
    cfg.write_text(IMAGE_SSHD_CONFIG.read_text().replace(HOST_KEY_PATH, str(key))
                   .replace("/etc/ssh/sshd_config.d/", f"{tmp_path}/none.d/"))
    os.makedirs("/run/sshd", exist_ok=True)
    argv = sshd_argv(port=2222, config=str(cfg), config_text=cfg.read_text(), listen_address="10.0.1.23")
    assert argv[:7] == ["/usr/sbin/sshd", "-D", "-e", "-p", "2222", "-f", str(cfg)]
    assert argv[-2:] == ["-o", "ListenAddress=10.0.1.23"]
    # Ask sshd itself what it would listen on (-T instead of -D -e).
    test_argv = [argv[0], "-T"] + argv[3:]
    out = subprocess.run(test_argv, capture_output=True, text=True, check=True).stdout
    listen = sorted(line.split()[1] for line in out.splitlines() if line.startswith("listenaddress "))
    assert listen == ["10.0.1.23:2222", "127.0.0.1:2222"]


def test_sshd_argv_refuses_wildcards():
    with pytest.raises(SpecError, match=r"sshd listen address '0.0.0.0': expected the cluster interface's address"):
        sshd_argv(listen_address="0.0.0.0")
    assert sshd_argv(listen_address="fd00::1")[-1] == "ListenAddress=[fd00::1]"
    with pytest.raises(SpecError, match=r"sshd port 70000: expected 1-65535"):
        sshd_argv(port=70000)
