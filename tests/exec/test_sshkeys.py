"""Per-job key material (mpirun_kit/exec/sshkeys.py): derivation compared as values; the
files and the sshd argv checked by the real ssh-keygen and sshd."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mpirun_kit.exec import sshkeys
from mpirun_kit.exec.sshd import sshd_argv
from mpirun_kit.errors import ClusterError, SpecError

from clock_kit import FakeClock

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


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_derived_keys_log_in_through_the_image_sshd_config(tmp_path):
    """End to end on 127.0.0.1: `keys install` files + docker/sshd_config + sshd_argv; ssh logs in
    with the derived user key and accepts the pinned host key with StrictHostKeyChecking=yes."""
    import socket
    import time

    import shutil
    import tempfile

    secret = tmp_path / "job-secret"
    subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "keys", "new", "--out", str(secret)], check=True)
    # sshd's StrictModes rejects keys under a world-writable directory such as /tmp,
    # so the installed files live under /run (root-owned, 755), as they would in ~root.
    keys_root = Path(tempfile.mkdtemp(prefix="mpirun-kit-sshkeys-", dir="/run"))
    ssh_dir, host_key = keys_root / "ssh", keys_root / "hostkey" / "ssh_host_ed25519_key"
    subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "keys", "install", "--secret-file", str(secret),
                    "--job", "e2e", "--hosts", "algo-1,algo-2", "--ssh-dir", str(ssh_dir),
                    "--host-key", str(host_key), "--from", "127.0.0.1"], check=True)
    cfg = tmp_path / "sshd_config"
    cfg.write_text((REPO / "docker" / "sshd_config").read_text().replace(sshkeys.HOST_KEY_PATH, str(host_key))
                   .replace("/etc/ssh/sshd_config.d/", f"{tmp_path}/none.d/"))
    os.makedirs("/run/sshd", exist_ok=True)
    port = _free_port()
    # 127.0.0.2 stands in for the cluster interface's address (the config adds 127.0.0.1).
    argv = sshd_argv(port=port, config=str(cfg), listen_address="127.0.0.2")
    # root's real ~/.ssh is not ours to touch: point sshd at the installed authorized_keys.
    argv += ["-o", f"AuthorizedKeysFile={ssh_dir}/authorized_keys", "-o", f"PidFile={tmp_path}/sshd.pid"]
    sshd = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "sshd.log", "wb"))
    try:
        end = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.2", port), timeout=1).close()
                break
            except OSError:
                assert sshd.poll() is None and time.monotonic() < end, (tmp_path / "sshd.log").read_text()
                time.sleep(0.05)
        ssh = ["ssh", "-F", "/dev/null", "-i", str(ssh_dir / "id_ed25519"), "-o", "BatchMode=yes",
               "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
               "-o", f"UserKnownHostsFile={ssh_dir}/known_hosts", "-o", "HostKeyAlias=algo-2",
               "-p", str(port), "root@127.0.0.2", "echo", "in"]
        out = subprocess.run(ssh, capture_output=True, text=True, timeout=30)
        assert (out.returncode, out.stdout) == (0, "in\n"), out.stderr + (tmp_path / "sshd.log").read_text()
        # Any other key is refused: only the job's key logs in.
        other = tmp_path / "other"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
        ssh[ssh.index("-i") + 1] = str(other)
        denied = subprocess.run(ssh, capture_output=True, text=True, timeout=30)
        assert denied.returncode == 255 and "Permission denied (publickey)" in denied.stderr
        # The job's own key from an address outside from= (127.0.0.3 stands in for another job's host).
        ssh[ssh.index("-i") + 1] = str(ssh_dir / "id_ed25519")
        outside = subprocess.run(ssh[:1] + ["-b", "127.0.0.3"] + ssh[1:], capture_output=True, text=True, timeout=30)
        assert outside.returncode == 255 and "Permission denied (publickey)" in outside.stderr, outside.stderr
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)
        shutil.rmtree(keys_root, ignore_errors=True)


def _keys(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent"}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "keys", *args], capture_output=True,
                          text=True, env=env, timeout=60)


def test_keys_cli_new_show_install_dry_run(tmp_path):
    secret = tmp_path / "s" / "job-secret"
    assert _keys("new", "--out", str(secret)).returncode == 0
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    again = _keys("new", "--out", str(secret))
    assert again.returncode == 64
    assert f"keys new: {secret} exists; a job secret is never overwritten silently" in again.stderr
    m = sshkeys.derive_material(sshkeys.parse_secret(secret.read_text()), "job-7")
    # The job name comes from SageMaker's TRAINING_JOB_NAME when --job is absent.
    shown = _keys("show", "--secret-file", str(secret), env_extra={"TRAINING_JOB_NAME": "job-7"})
    assert shown.stdout.splitlines() == [
        "job:        job-7",
        f"user key:   {m.user_fingerprint}  {m.user_public}",
        f"host key:   {m.host_fingerprint}  {m.host_public}",
    ]
    dry = _keys("install", "--secret-file", str(secret), "--job", "job-7", "--hosts", "algo-1,algo-2",
                "--ssh-dir", str(tmp_path / "ssh"), "--dry-run", "--from", "10.0.1.5,10.0.1.6,127.0.0.1")
    assert dry.returncode == 0, dry.stderr
    assert (f"{tmp_path}/ssh/authorized_keys (mode 0600):\n  from=\"10.0.1.5,10.0.1.6,127.0.0.1\",restrict "
            f"{m.user_public}\n") in dry.stdout
    assert "PRIVATE KEY" not in dry.stdout
    assert f"{tmp_path}/ssh/id_ed25519 (mode 0600):\n  <private key, not shown>" in dry.stdout
    assert f"{tmp_path}/ssh/known_hosts (mode 0644):\n  algo-1,algo-2 ssh-ed25519 " in dry.stdout
    assert not (tmp_path / "ssh").exists()


def test_keys_cli_errors(tmp_path):
    no_job = _keys("show", "--secret-file", str(tmp_path / "x"))
    assert no_job.returncode == 64
    assert "keys: no job name; pass --job NAME (on SageMaker TRAINING_JOB_NAME is used)" in no_job.stderr
    missing = _keys("show", "--secret-file", str(tmp_path / "x"), "--job", "j")
    assert missing.returncode == 64
    assert f"keys: cannot read secret file {tmp_path}/x (No such file or directory)" in missing.stderr


def _sagemaker_host(tmp_path: Path, hosts: list[str]) -> Path:
    opt_ml = tmp_path / "opt_ml"
    (opt_ml / "input" / "config").mkdir(parents=True)
    # "lo" stands in for eth0: the one interface every machine has.
    (opt_ml / "input" / "config" / "resourceconfig.json").write_text(json.dumps(
        {"current_host": hosts[0], "hosts": hosts, "network_interface_name": "lo"}))
    return opt_ml


def test_keys_install_sagemaker(tmp_path):
    import json as _json

    opt_ml = _sagemaker_host(tmp_path, ["algo-1", "algo-2"])
    secret = tmp_path / "job-secret"
    secret.write_text(sshkeys.format_secret(SECRET))
    listen = tmp_path / "sshd_config.d" / "50-mpirun-kit-listen.conf"
    args = ["install", "--sagemaker", "--opt-ml", str(opt_ml), "--secret-file", str(secret),
            "--ssh-dir", str(tmp_path / "ssh"), "--host-key", str(tmp_path / "hk"), "--listen-config", str(listen),
            "--from", "10.0.1.5,10.0.1.6"]  # algo-N resolve only on a real cluster (the sim test resolves them)
    dry = _keys(*args, "--dry-run", "--json", env_extra={"TRAINING_JOB_NAME": "sm-job"})
    assert dry.returncode == 0, dry.stderr
    planned = {f["path"]: f for f in _json.loads(dry.stdout)}
    assert planned[str(listen)]["content"] == "ListenAddress 127.0.0.1\n"
    m = sshkeys.derive_material(SECRET, "sm-job")
    assert planned[f"{tmp_path}/ssh/known_hosts"]["content"] == (
        "algo-1,algo-2 " + " ".join(m.host_public.split()[:2]) + "\n")
    done = _keys(*args, env_extra={"TRAINING_JOB_NAME": "sm-job"})
    assert done.returncode == 0, done.stderr
    assert listen.read_text() == "ListenAddress 127.0.0.1\n"
    assert (tmp_path / "ssh" / "id_ed25519.pub").read_text() == m.user_public + "\n"


def test_keys_install_sagemaker_without_a_secret(tmp_path):
    one = _sagemaker_host(tmp_path / "one", ["algo-1"])
    proc = _keys("install", "--sagemaker", "--opt-ml", str(one), "--secret-file", str(tmp_path / "none"),
                 "--ssh-dir", str(tmp_path / "ssh"), env_extra={"TRAINING_JOB_NAME": "j"})
    assert proc.returncode == 0
    assert "single-host job and no job secret: no ssh keys needed" in proc.stderr
    assert not (tmp_path / "ssh").exists()
    two = _sagemaker_host(tmp_path / "two", ["algo-1", "algo-2"])
    proc = _keys("install", "--sagemaker", "--opt-ml", str(two), "--secret-file", str(tmp_path / "none"),
                 env_extra={"TRAINING_JOB_NAME": "j"})
    assert proc.returncode == 64
    assert (f"keys install: 2-host job but no job secret at {tmp_path}/none; give the job the input channel "
            "'mpirun-keys' (s3://BUCKET/PREFIX/keys/${job_name}/: `mpirun_kit submit` makes the secret there)") \
        in proc.stderr
    off = _keys("install", "--sagemaker", "--opt-ml", str(tmp_path / "nowhere"))
    assert off.returncode == 0
    assert "not a SageMaker host, no ssh keys installed" in off.stderr
    plain = _keys("install", "--secret-file", "x")
    assert plain.returncode == 64
    assert "keys install: pass --secret-file FILE and --hosts H1,H2 (or --sagemaker" in plain.stderr


def test_image_ssh_client_config_refuses_unknown_hosts_and_prompts():
    """The image's /etc/ssh/ssh_config (docker/ssh_config), as the real ssh client resolves it for a peer."""
    cfg = REPO / "docker" / "ssh_config"
    assert ("COPY docker/ssh_config /etc/ssh/ssh_config"
            in (REPO / "docker" / "Dockerfile").read_text()), "the Dockerfile must install docker/ssh_config"
    resolved = subprocess.run(["ssh", "-G", "-F", str(cfg), "algo-2"], capture_output=True, text=True, check=True)
    options = dict(line.split(" ", 1) for line in resolved.stdout.splitlines() if " " in line)
    assert options["stricthostkeychecking"] == "true"  # ssh -G prints `yes` as true
    assert options["batchmode"] == "yes"
    assert options["passwordauthentication"] == "no" and options["identitiesonly"] == "yes"


def test_from_addresses_are_resolved_or_the_install_stops():
    """The addresses behind from=: every host name resolved (retried), loopback added, unresolvable hosts named."""
    calls = []

    def resolve(host, *_):
        calls.append(host)
        if host == "algo-2" and calls.count("algo-2") < 3:  # DNS comes up a little after the hosts
            raise OSError(-2, "Name or service not known")
        return [(0, 0, 0, "", ({"algo-1": "10.0.1.5", "algo-2": "10.0.1.6"}[host], 0))]

    clock = FakeClock()
    assert sshkeys.resolve_addresses(["algo-1", "algo-2"], clock=clock, resolve=resolve) == (
        "10.0.1.5", "10.0.1.6", "127.0.0.1", "::1")
    with pytest.raises(ClusterError) as e:
        sshkeys.resolve_addresses(["algo-1", "algo-9"], timeout_s=5, clock=FakeClock(),
                                  resolve=lambda h, *_: resolve(h) if h != "algo-9" else (_ for _ in ()).throw(
                                      OSError(-2, "Name or service not known")))
    assert str(e.value) == (
        "keys install: host name(s) did not resolve within 5s: algo-9: [Errno -2] Name or service not known; "
        "authorized_keys admits the job's key only from the job's host addresses, so every host must resolve "
        "(check /etc/hosts or DNS, or raise --resolve-timeout-s)")
    m = sshkeys.derive_material(SECRET, "job-a")
    with pytest.raises(SpecError, match=r"keys install: 'algo-1' does not appear to be an IPv4 or IPv6 address; "
                                        r"from= takes IP addresses only"):
        sshkeys.plan_install(m, ["algo-1"], from_addresses=["algo-1"])


def test_from_addresses_name_an_ipv4_mapped_address_as_ipv4():
    """An /etc/hosts that also names a host for ::ffff:A.B.C.D (sim/layout.py does, for dual-stack servers' reverse
    lookups) gives that host once, as A.B.C.D: sshd matches a v4 client on a dual-stack socket as IPv4, so the mapped
    form in from= would never match anything."""
    def resolve(host, *_):
        v4 = {"algo-1": "10.0.1.5", "algo-2": "10.0.1.6"}[host]
        return [(0, 0, 0, "", (v4, 0)), (0, 0, 0, "", (f"::ffff:{v4}", 0, 0, 0))]

    assert sshkeys.resolve_addresses(["algo-1", "algo-2"], clock=FakeClock(), resolve=resolve) == (
        "10.0.1.5", "10.0.1.6", "127.0.0.1", "::1")


def _make_job_keys(*args: str) -> subprocess.CompletedProcess:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": "/nonexistent"}
    return subprocess.run(["bash", str(REPO / "ops" / "make-job-keys.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_each_job_secret_has_a_prefix_of_its_own_and_is_deleted_after_the_job(tmp_path):
    shared = _make_job_keys("--job", "job-7", "--out", "s3://bucket/mpirun-kit/keys/", "--dry-run")
    assert shared.returncode == 64
    assert ("--out s3://bucket/mpirun-kit/keys/: an S3 prefix must end in the job name (job-7), e.g. "
            "s3://bucket/mpirun-kit/keys/job-7/;") in shared.stderr
    gone = _make_job_keys("--job", "job-7", "--out", "s3://bucket/mpirun-kit/keys/job-7/", "--delete", "--dry-run",
                          "--region", "us-west-2")
    assert (gone.returncode, gone.stdout) == (
        0, "+ aws s3 rm s3://bucket/mpirun-kit/keys/job-7/job-secret --only-show-errors --region us-west-2\n")
    out = tmp_path / "job-7"
    assert _make_job_keys("--job", "job-7", "--out", str(out)).returncode == 0
    assert (out / "job-secret").exists()
    deleted = _make_job_keys("--job", "job-7", "--out", str(out), "--delete")
    assert deleted.returncode == 0 and f"job secret {out}/job-secret deleted" in deleted.stderr
    assert not (out / "job-secret").exists()
