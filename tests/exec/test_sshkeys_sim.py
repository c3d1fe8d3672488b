"""Per-job derived keys across the simulated cluster: every host runs `mpirun_kit keys
install` from the same secret, sshd restarts with the derived host key, and hosts
then reach each other over ssh with StrictHostKeyChecking=yes (the sim's client
config) -- nothing exchanged between hosts.

The job is algo-1 and algo-2; algo-3 is a host on the same network that is not in the
job but holds the job's key (as another job under the same IAM role could): the
authorized key's from= (the job's host addresses, resolved at install) refuses it."""
from __future__ import annotations

import os
import sys

import pytest

from mpirun_kit.exec import sshkeys
from mpirun_kit.sim import SimCluster

pytestmark = pytest.mark.sim


def test_hosts_trust_each_other_with_keys_derived_from_one_secret(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the simulated cluster needs root (network namespaces); run the sim tests as root")
    secret = tmp_path / "job-secret"
    secret.write_text(sshkeys.format_secret(os.urandom(sshkeys.SECRET_BYTES)))
    with SimCluster(3, tmp_path / "sim", name="h3keys") as sim:
        hosts = "algo-1,algo-2"  # algo-3 is not in the job, but gets the key below
        for h in sim.hosts:
            proc = sim.run(h.name, [sys.executable, "-m", "mpirun_kit.cli.main", "keys", "install",
                                    "--secret-file", str(secret), "--job", "sim-job", "--hosts", hosts,
                                    "--ssh-dir", "/root/.ssh", "--host-key", str(h.host_key)])
            assert proc.returncode == 0, proc.stderr
            # sshd reads its host key at start: restart it on the derived one.
            sim.stop_sshd(h.name)
            sim.popen(h.name, ["/usr/sbin/sshd", "-D", "-e", "-f", str(h.sshd_config)],
                      log_path=h.dir / "sshd-derived.log")
        material = sshkeys.derive_material(sshkeys.parse_secret(secret.read_text()), "sim-job")
        ok = None
        for _ in range(100):  # sshd restarts within a second; bounded retry, no fixed sleep
            ok = sim.run("algo-1", ["ssh", "algo-2", "hostname"], timeout=30)
            if ok.returncode == 0:
                break
            sim.clock.sleep(0.1)
        assert (ok.returncode, ok.stdout.strip()) == (0, "algo-2"), ok.stderr
        # The key algo-2 presented is the derived host key that known_hosts pins.
        scan = sim.run("algo-1", ["ssh-keygen", "-F", "algo-2", "-f", "/root/.ssh/known_hosts"])
        assert material.host_public.split()[1] in scan.stdout
        # algo-2 admits the key only from the job's addresses.
        authorized = sim.run("algo-2", ["cat", "/root/.ssh/authorized_keys"]).stdout
        assert authorized.startswith(f'from="{sim.host("algo-1").address},{sim.host("algo-2").address},'
                                     '127.0.0.1,::1",restrict ssh-ed25519 '), authorized
        # algo-3 holds the same key (and pins algo-2's host key), yet is refused.
        outside = sim.run("algo-3", ["ssh", "algo-2", "hostname"], timeout=30)
        assert outside.returncode == 255 and "Permission denied (publickey)" in outside.stderr, outside.stderr
