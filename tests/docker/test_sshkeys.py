"""Per-job key material (mpirun_kit/sshkeys.py): derivation compared as values; the
files and the sshd argv checked by the real ssh-keygen and sshd."""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from mpirun_kit import sshkeys
from mpirun_kit.errors import SpecError

REPO = Path(__file__).resolve().parents[2]
SECRET = bytes(range(32))


def test_same_secret_and_job_give_the_same_keys_on_every_host():
    a = sshkeys.derive_material(SECRET, "mask-rcnn-2026-11-21")
    b = sshkeys.derive_material(SECRET, "mask-rcnn-2026-11-21")
    assert (a.user_public, a.host_public) == (b.user_public, b.host_public)
    assert a.user_public.startswith("ssh-ed25519 ") and a.user_public.endswith(" mpirun_kit-user@mask-rcnn-2026-11-21")
    # The user key is never the host key.
    assert a.user_public.split()[1] != a.host_public.split()[1]


def test_another_job_or_secret_gives_other_keys():
    base = sshkeys.derive_material(SECRET, "job-a")
    other_job = sshkeys.derive_material(SECRET, "job-b")
    other_secret = sshkeys.derive_material(bytes(32), "job-a")
    keys = {m.user_public.split()[1] for m in (base, other_job, other_secret)}
    assert len(keys) == 3


def test_private_keys_stay_out_of_repr():
    m = sshkeys.derive_material(SECRET, "job-a")
    assert "PRIVATE" not in repr(m)
    files = sshkeys.plan_install(m, ["algo-1"])
    assert "PRIVATE" not in repr(files)
    assert "<private key, not shown>" in files[0].describe()


def test_fingerprint_matches_ssh_keygen(tmp_path):
    m = sshkeys.derive_material(SECRET, "job-a")
    pub = tmp_path / "k.pub"
    pub.write_text(m.user_public + "\n")
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(pub)], capture_output=True, text=True, check=True).stdout
    assert out.split()[1] == m.user_fingerprint


def test_plan_install_values():
    m = sshkeys.derive_material(SECRET, "job-a")
    files = sshkeys.plan_install(m, ("algo-1", "algo-2"), ssh_dir="/h/.ssh", host_key_path="/k/hk")
    assert [(f.path, oct(f.mode), f.secret) for f in files] == [
        ("/h/.ssh/id_ed25519", "0o600", True),
        ("/h/.ssh/id_ed25519.pub", "0o644", False),
        ("/h/.ssh/authorized_keys", "0o600", False),
        ("/h/.ssh/known_hosts", "0o644", False),
        ("/k/hk", "0o600", True),
        ("/k/hk.pub", "0o644", False),
    ]
    assert files[2].content == f"restrict {m.user_public}\n"
    assert files[3].content == "algo-1,algo-2 " + " ".join(m.host_public.split()[:2]) + "\n"


def test_written_files_are_valid_keys_with_sshd_modes(tmp_path):
    m = sshkeys.derive_material(SECRET, "job-a")
    ssh_dir = tmp_path / "home" / ".ssh"
    ssh_dir.mkdir(parents=True, mode=0o755)
    os.chmod(ssh_dir, 0o755)
    sshkeys.write_files(sshkeys.plan_install(m, ["algo-1"], str(ssh_dir), str(tmp_path / "hk" / "host")))
    assert stat.S_IMODE(ssh_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((ssh_dir / "id_ed25519").stat().st_mode) == 0o600
    assert stat.S_IMODE((ssh_dir / "known_hosts").stat().st_mode) == 0o644
    # ssh-keygen recovers the public key from the private file: the private key is real.
    for priv, pub in ((ssh_dir / "id_ed25519", m.user_public), (tmp_path / "hk" / "host", m.host_public)):
        out = subprocess.run(["ssh-keygen", "-y", "-f", str(priv)], capture_output=True, text=True, check=True)
        assert out.stdout.split()[:2] == pub.split()[:2]
    assert not [p for p in ssh_dir.iterdir() if p.name.startswith(".")], "temp files left behind"


def test_secret_round_trip_and_errors():
    assert sshkeys.parse_secret(sshkeys.format_secret(SECRET)) == SECRET
    with pytest.raises(SpecError, match=r"/x/job-secret: expected 64 hex characters \(a 32-byte job secret\), "
                                        r"got 5 characters; create one with `mpirun_kit keys new --out /x/job-secret`"):
        sshkeys.parse_secret("abcde", "/x/job-secret")
    with pytest.raises(SpecError, match="job secret: expected 32 bytes, got 3"):
        sshkeys.derive_material(b"abc", "j")
    with pytest.raises(SpecError, match=r"job name 'a b': expected a non-empty name without whitespace"):
        sshkeys.derive_material(SECRET, "a b")


def test_plan_install_errors():
    m = sshkeys.derive_material(SECRET, "j")
    with pytest.raises(SpecError, match="keys install: no hosts; pass every host of the job"):
        sshkeys.plan_install(m, [])
    with pytest.raises(SpecError, match=r"host name 'a,b' has whitespace or a comma"):
        sshkeys.plan_install(m, ["a,b"])


def test_sshd_argv_listens_on_the_cluster_address_only(tmp_path):
    key = tmp_path / "hk"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cfg = tmp_path / "sshd_config"
    cfg.write_text((REPO / "docker" / "sshd_config").read_text().replace(sshkeys.HOST_KEY_PATH, str(key)))
    os.makedirs("/run/sshd", exist_ok=True)
    argv = sshkeys.sshd_argv("10.0.1.23", port=2222, config=str(cfg))
    assert argv == ["/usr/sbin/sshd", "-D", "-e", "-f", str(cfg), "-p", "2222", "-o", "ListenAddress=10.0.1.23"]
    # Ask sshd itself what it would listen on (-T instead of -D -e).
    test_argv = [argv[0], "-T"] + argv[3:]
    out = subprocess.run(test_argv, capture_output=True, text=True, check=True).stdout
    listen = sorted(line.split()[1] for line in out.splitlines() if line.startswith("listenaddress "))
    assert listen == ["10.0.1.23:2222", "127.0.0.1:2222"]


def test_sshd_argv_refuses_wildcards():
    with pytest.raises(SpecError, match=r"sshd listen address '0.0.0.0': expected the cluster interface's address"):
        sshkeys.sshd_argv("0.0.0.0")
    assert sshkeys.sshd_argv("fd00::1")[-1] == "ListenAddress=[fd00::1]"
