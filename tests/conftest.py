"""Fixtures shared by every test area.

``moto_server``: a real moto server process on 127.0.0.1 (no AWS account is
reachable from these machines, so AWS APIs are served by moto; where moto is
known to be unfaithful, tests use botocore's Stubber and say so).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from moto_process import free_port, moto_process

REPO = Path(__file__).resolve().parents[1]


def _store_jobs(store: Path) -> dict[str, tuple[str, str]]:
    """The default store's records, read only (never made, never written): job id -> (spec, run_dir)."""
    import sqlite3

    db = store / "jobs.db"
    if not db.is_file():
        return {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            return {r[0]: (r[1] or "", r[2] or "") for r in con.execute("SELECT job_id, spec, run_dir FROM jobs")}
        finally:
            con.close()
    except sqlite3.Error:
        return {}


@pytest.fixture(scope="session", autouse=True)
def users_record_store_untouched(tmp_path_factory):
    """No test leaves a job record in the user's default store (``$XDG_STATE_HOME/mpirun_kit``, else
    ``~/.local/state/mpirun_kit``: what records/store.py picks without MPIRUN_KIT_STATE_DIR); issue #40: it held 8
    jobs of the test suite.  A test that escapes ``job_records`` below (a child process given an environment of
    its own, say) fails the run here, at the last test's teardown, naming the records.  A record counts as the
    suite's when its spec or run directory is under this session's temporary directory or tests/ (others, from
    people using the tool on this machine meanwhile, are theirs)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    store = Path(base) / "mpirun_kit"
    before = set(_store_jobs(store))
    yield store
    ours = (str(tmp_path_factory.getbasetemp()), str(REPO / "tests"))
    added = sorted(j for j, (spec, run_dir) in _store_jobs(store).items()
                   if j not in before and any(p.startswith(ours) for p in (spec, run_dir)))
    assert not added, (f"the test suite wrote job records into the user's store {store}: {added[:10]}; every test "
                       "must use its own (tests/conftest.py job_records sets MPIRUN_KIT_STATE_DIR)")


@pytest.fixture(autouse=True)
def job_records(tmp_path_factory, monkeypatch):
    """Every test's job records in a store of its own (mpirun_kit/records/), never the user's ~/.local/state:
    ``submit`` records each run; child processes inherit the variable."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("MPIRUN_KIT_STATE_DIR", str(state))
    return state


@pytest.fixture(autouse=True)
def user_config(tmp_path_factory, monkeypatch):
    """Every test's configuration file of its own (MPIRUN_KIT_CONFIG_DIR), never the user's ~/.config: it holds
    the stack prefix (stack/prefix.py), here ``mrk``, so ``mrk-vpc`` is the stack ``mrk-vpc`` whoever runs the
    suite; child processes inherit the variable.  Tests of the prefix itself write their own."""
    config = tmp_path_factory.mktemp("config")
    (config / "config").write_text("stack_prefix = mrk\n")
    monkeypatch.setenv("MPIRUN_KIT_CONFIG_DIR", str(config))
    return config / "config"


@pytest.fixture(scope="session")
def moto_server():
    """Start ``moto_server`` on 127.0.0.1 for the session; yield its endpoint URL."""
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    if exe is None:
        pytest.fail("moto_server not installed: run `bash ops/quickstart.sh setup` (installs the test extras)")
    port = free_port()
    with moto_process([exe, "-H", "127.0.0.1", "-p", str(port)], port, timeout_s=30, what="moto_server") as url:
        yield url


@pytest.fixture
def moto(moto_server, monkeypatch):
    """A reset moto server plus dummy credentials; yields the endpoint URL."""
    urllib.request.urlopen(urllib.request.Request(moto_server + "/moto-api/reset", method="POST"), timeout=10).read()
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-west-2"}.items():
        monkeypatch.setenv(k, v)
    return moto_server


#: the one real Slurm of the test run (``slurm_cluster``): no other test file uses the name, and the pid makes it
#: this run's alone (two test runs on one machine, such as a CI run beside a developer's, never share it).
SLURM_SIM = f"tslurm{os.getpid():x}"[:12]


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real Slurm (Debian's 22.05 daemons, munge) in a 3-host simulated cluster, brought up once for every test
    that needs one (tests/targets/test_slurm_live.py, tests/sim/test_slurm.py) and torn down at the session's end:
    slurmctld and slurmdbd with MariaDB (so ``sacct`` answers) on algo-1, a slurmd on every host.  Yields
    (SimCluster, SlurmCluster, a directory for the tests' run directories).  Tests share it, each with job names
    and run directories of its own; one that stops a node's daemons brings them back and waits until it is idle."""
    if os.geteuid() != 0:
        pytest.skip("the simulated cluster needs root")
    from mpirun_kit.sim import SimCluster
    from mpirun_kit.sim.slurm import SlurmCluster

    root = tmp_path_factory.mktemp("slurmsim")
    with SimCluster(3, root / "sim", SLURM_SIM) as sim:
        slurm = SlurmCluster(sim, accounting=True).up()
        try:
            yield sim, slurm, root
        finally:
            slurm.down()


def _sim_netns() -> set[str]:
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    except OSError:
        return set()
    return {line.split()[0] for line in out.splitlines() if line.startswith("mrk-")}


def pytest_sessionstart(session):
    session.config._mrk_netns_at_start = _sim_netns()


def pytest_sessionfinish(session, exitstatus):
    """No test may leave a simulated host behind (namespace, and so its processes).

    Enforced (the run fails, then the leftovers are swept) under CI, where this
    is the only test session; during development other sessions' clusters may
    be live, so it only warns.
    """
    left = _sim_netns() - getattr(session.config, "_mrk_netns_at_start", set())
    if not left:
        return
    msg = f"simulated-cluster namespaces left behind by this test run: {sorted(left)}"
    if os.environ.get("CI") == "true":
        print(f"\nERROR: {msg}", file=sys.stderr)
        from mpirun_kit.sim import down_all
        down_all()
        session.exitstatus = 1
    else:
        print(f"\nWARNING: {msg}", file=sys.stderr)
