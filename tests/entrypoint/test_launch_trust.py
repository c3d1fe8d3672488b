"""Issue 27 finding 1: `launch` read its plan from a world-writable default directory.  Another user (uid
``nobody``) plants hyperparameters.json where launch looks by default; root's `launch --dry-run` then showed
an LD_PRELOAD and an --mca plm_rsh_agent of the attacker's: code execution as whoever runs launch.

Each test runs in a mount namespace of its own with a fresh /tmp (the real one is shared with every other test
on this machine), as root, with the attacker as nobody; the same test runs on the tree before the fix, where
it fails (the planted values reach the plan)."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]

PLANT = r"""
import json, os, sys
hp = {"mpirun_kit_launch": json.dumps({"program": ["true"], "env": [["LD_PRELOAD", "/tmp/evil.so"]],
                                        "mca": [["plm_rsh_agent", "/tmp/evil-agent"]]})}
for d in sys.argv[1:]:
    cfg = os.path.join(d, "input", "config")
    os.makedirs(cfg, mode=0o777, exist_ok=True)
    if os.stat(d).st_uid == os.geteuid():
        os.chmod(d, 0o777)
    with open(os.path.join(cfg, "hyperparameters.json"), "w") as f:
        json.dump(hp, f)
print("planted")
"""


def in_fresh_tmp(script: str) -> subprocess.CompletedProcess:
    """Run ``script`` (bash) as root in a new mount namespace whose /tmp is a fresh sticky tmpfs."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.skip("needs root, unshare and setpriv")
    body = "set -e\nmount -t tmpfs -o mode=1777 tmpfs /tmp\n" + textwrap.dedent(script)
    env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "bash", "-c", body],
                          capture_output=True, text=True, timeout=100, env=env, cwd=REPO)


def launch_cmd(*args) -> str:
    return " ".join([sys.executable, "-m", "mpirun_kit.cli.main", "launch", *args])


def plant_cmd(*dirs) -> str:
    return (f"setpriv --reuid=nobody --regid=nogroup --clear-groups /usr/bin/python3 -c '{PLANT}' "
            + " ".join(dirs))


def test_another_users_directory_at_launchs_default_is_refused():
    uid = os.geteuid()
    res = in_fresh_tmp(f"""
        {plant_cmd("/tmp/mpirun-kit-launch", f"/tmp/mpirun-kit-launch-{uid}")}
        set +e
        {launch_cmd("--hosts", "localhost:1", "--mpi-flavour", "openmpi4", "--dry-run", "--json", "--", "true")}
        echo "exit=$?"
    """)
    out = res.stdout + res.stderr
    assert "planted" in out, out
    assert "/tmp/evil" not in res.stdout, out                   # nothing of the attacker's reached the plan
    assert "exit=64" in out, out
    assert (f"/tmp/mpirun-kit-launch-{uid}: the launch directory (--opt-ml) is owned by uid 65534 (nobody) with "
            f"mode 0777; it must be yours (uid {uid}) with mode 0700, since launch reads its plan from it: remove it "
            "(it may hold another user's files), or pass --opt-ml DIR, a directory of your own") in out, out


def test_launchs_default_directory_is_made_private_and_used():
    uid = os.geteuid()
    res = in_fresh_tmp(f"""
        {launch_cmd("--hosts", "localhost:1", "--mpi-flavour", "openmpi4", "--dry-run", "--", "true")}
        stat -c '%u %a' /tmp/mpirun-kit-launch-{uid}
    """)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1] == f"{uid} 700"


def test_a_directory_of_launchs_default_with_group_access_is_refused():
    uid = os.geteuid()
    res = in_fresh_tmp(f"""
        mkdir -m 0750 /tmp/mpirun-kit-launch-{uid}
        set +e
        {launch_cmd("--hosts", "localhost:1", "--mpi-flavour", "openmpi4", "--dry-run", "--", "true")}
        echo "exit=$?"
    """)
    out = res.stdout + res.stderr
    assert "exit=64" in out and f"is owned by uid {uid} (root) with mode 0750; it must be yours" in out, out


def test_a_plan_file_another_user_wrote_is_never_read(tmp_path):
    """An explicit --opt-ml (or --spec, --hostfile, the job secret) is read only when no one else could have
    written it: here a directory of root's, made world-writable, holding nobody's hyperparameters.json."""
    res = in_fresh_tmp(f"""
        mkdir -m 0777 /tmp/opt
        {plant_cmd("/tmp/opt")}
        set +e
        {launch_cmd("--hosts", "localhost:1", "--opt-ml", "/tmp/opt", "--mpi-flavour", "openmpi4", "--dry-run",
                    "--", "true")}
        echo "exit=$?"
    """)
    out = res.stdout + res.stderr
    assert "exit=64" in out and "/tmp/evil" not in res.stdout, out
    assert ("/tmp/opt/input/config/hyperparameters.json: plan input not read: the file is owned by uid 65534 "
            "(nobody), mode 0644; mpirun_kit plans only from files that you (uid 0) or root own and no one else can "
            "write, in directories no one else can write: remove it and write it again yourself, or chown 0 "
            "/tmp/opt/input/config/hyperparameters.json && chmod go-w /tmp/opt/input/config/hyperparameters.json") \
        in out, out
