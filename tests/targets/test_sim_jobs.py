"""Job records and the lifecycle verbs on the simulated cluster (issue #28): a relative script from another
directory, submit --detach, status, logs --rank, sim list naming the job, cancel leaving nothing.

Real processes end to end: namespaces and sshd per host, the per-host entrypoints, mpirun across hosts;
`mpirun_kit` run as a user runs it, a fresh interpreter per command.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from jobs_kit import LONG, mrk, processes_with, wait_for

pytestmark = pytest.mark.sim


def netns() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def sim_spec(d: Path, name: str, command: str, extra: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{name}.yaml"
    p.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: {name}
        target: {{type: sim}}
        resources: {{hosts: 2, processes_per_host: 1}}
        program: {{command: {command}}}
        """) + extra)
    return p


def test_a_relative_script_runs_beside_the_spec_on_every_simulated_host(tmp_path):
    """Issue #28 item 4: on sim the pre-launch check passed (it looked beside the spec) but the ranks ran in
    `/` and exited 2 (`python: can't open file '//hi.py'`).  Now every host's ranks run in the spec's directory."""
    d = tmp_path / "spec"
    spec = sim_spec(d, "rel", "[python3, hi.py]")
    (d / "hi.py").write_text("import os, socket; print('cwd', os.getcwd(), socket.gethostname())\n")
    (tmp_path / "elsewhere").mkdir()
    r = mrk("submit", str(spec), "--json", "-q", cwd=tmp_path / "elsewhere", check=0)
    assert f"[0 algo-1] cwd {d} algo-1" in r.stdout and f"[1 algo-2] cwd {d} algo-2" in r.stdout
    assert json.loads(r.stdout.splitlines()[-1])["exit_code"] == 0


def test_detach_status_logs_sim_list_and_cancel_leave_no_namespace_or_process(tmp_path):
    marker = f"mrk-{uuid.uuid4().hex[:8]}"
    spec = sim_spec(tmp_path / "spec", "simlong", f"[python3, -c, {json.dumps(LONG)}, {marker}]",
                    "timeouts: {grace_s: 3}\n")
    job = mrk("submit", str(spec), "--detach", "-q", check=0).stdout.strip()
    status = json.loads(mrk("status", job, "--json", check=0).stdout)
    cluster = status["native"]
    assert status["target"] == "sim" and cluster == "j" + job.rsplit("-", 1)[1]
    wait_for(lambda: "[1 algo-2] tick 1" in mrk("logs", job).stdout, "rank 1's second line", 180)
    ones = mrk("logs", job, "--rank", "1", check=0).stdout.splitlines()
    assert ones and all(line.startswith("[1 algo-2] ") for line in ones), ones
    assert f"{cluster}  job {job}" in mrk("sim", "list", check=0).stdout.splitlines()
    assert f"mrk-{cluster}-" in netns()

    c = mrk("cancel", job, check=0)
    assert c.stdout.startswith(f"job {job}: cancelled"), c.stdout
    assert f"mrk-{cluster}-" not in netns()
    assert processes_with(marker) == []
    status = json.loads(mrk("status", job, "--json").stdout)
    assert status["state"] == "cancelled" and status["root_cause"] is None
    assert "rank got SIGTERM" in Path(status["run_dir"], "output.log").read_text()


def test_simulated_hosts_resolve_ipv4_mapped_addresses_without_dns(tmp_path):
    """Issue #28: every torch rank on sim warned "[c10d] The hostname of the client socket cannot be retrieved.
    err=-3": a dual-stack server sees an IPv4 client as ::ffff:A.B.C.D, whose reverse lookup went to DNS,
    which no simulated host reaches (EAI_AGAIN).  Fails before: getnameinfo raised gaierror -3 on every host."""
    probe = ("import socket; a = socket.gethostbyname('algo-2'); "
             "print('mapped', socket.getnameinfo(('::ffff:' + a, 1), socket.NI_NUMERICSERV)[0])")
    spec = sim_spec(tmp_path, "names", f"[python3, -c, {json.dumps(probe)}]")
    r = mrk("submit", str(spec), "-q", check=0)
    assert sorted(r.stdout.splitlines()) == ["[0 algo-1] mapped algo-2", "[1 algo-2] mapped algo-2"]
