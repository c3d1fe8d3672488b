"""Hang reports and the launch timeline on the simulated cluster: real sshd, real mpirun, 3 hosts x 2 ranks.

Every host runs the entrypoint as SageMaker would; the ranks run tests/bin/progress_steps.py,
which reports its steps with mpirun_kit.progress, or tests/bin/hang_modes.py, which reports nothing
and prints nothing (issue 29: judged from the wrappers' samples of their programs' stacks); stacks
come from py-spy (eu-stack/gdb where py-spy cannot read) run by each rank's wrapper.  The cluster
is shared by the module's tests (cluster name h7tobs).
"""
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.errors import ExitCode
from mpirun_kit.spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER, LaunchSpec, Timeouts
from mpirun_kit.observe import timeline

pytestmark = [pytest.mark.sim, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
PROG = str(REPO / "tests" / "bin" / "progress_steps.py")
SILENT = str(REPO / "tests" / "bin" / "hang_modes.py")
PY = sys.executable
ENTRY = [str(Path(PY).parent / "mpirun_kit"), "entrypoint", "--no-sshd"]
STALL_S = 3.0
FAST = Timeouts(ssh_ready_s=6.0, ssh_ready_per_host_s=0.5, master_connect_s=60.0, master_silence_s=5.0,
                daemon_wait_s=60.0, grace_s=5.0, stall_s=STALL_S, hang_abort_s=0)   # a report only, unless a test sets it
HOSTS = ("algo-1", "algo-2", "algo-3")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from mpirun_kit.sim import SimCluster

    with SimCluster(3, tmp_path_factory.mktemp("h7tobs"), "h7tobs") as sim:
        yield sim


def run_job(sim, program, timeouts=FAST):
    spec = LaunchSpec(program=tuple(program), processes_per_host=2, timeouts=timeouts)
    sim.write_sagemaker_config({LAUNCH_SPEC_HYPERPARAMETER: spec.to_json()})
    for h in sim.hosts:
        for name in ("failure", "hang-report.txt", "timeline.json", *(f"stuck.{r}" for r in range(6))):
            (h.opt_ml / "output" / name).unlink(missing_ok=True)
    return sim.start_entrypoints(ENTRY)


def report_path(sim):
    return sim.host("algo-1").opt_ml / "output" / "hang-report.txt"


def stop(procs):
    procs["algo-1"].send_signal(15)
    return {h: p.wait(60) for h, p in procs.items()}


def wait_for(path, deadline, procs):
    while not path.exists():
        assert not deadline.expired(), f"{path} did not appear in time\n" + procs["algo-1"].output()
        time.sleep(0.1)


def test_rank_stuck_before_allreduce_is_named_with_its_frame(sim):
    procs = run_job(sim, [PY, PROG, "hang", "50", "/opt/ml/output"])
    try:
        wait_for(sim.host("algo-2").opt_ml / "output" / "stuck.3", Deadline(SYSTEM_CLOCK, 90), procs)
        # The bound: the report within stall_s + 5 s of the rank getting stuck.
        wait_for(report_path(sim), Deadline(SYSTEM_CLOCK, STALL_S + 5), procs)
        text = report_path(sim).read_text()
        out = procs["algo-1"].output()
    finally:
        codes = stop(procs)
    assert "no rank advanced for" in text and f"(timeouts.stall_s = {STALL_S:g} s)" in text, text
    assert ("suspect: rank 3 on algo-2: not in a collective: waits in stuck_before_allreduce (progress_steps.py:"
            in text and "while ranks 0, 1, 2, 4, 5 wait in Allreduce" in text), text
    assert "* rank 3 on algo-2: last step 2," in text, text
    blocks = text.split("rank ")
    rank3 = next(b for b in blocks if b.startswith("3 on algo-2: last step"))
    assert "stuck_before_allreduce (" in rank3 and "progress_steps.py:" in rank3, text
    for r, h in ((0, "algo-1"), (1, "algo-1"), (2, "algo-2"), (4, "algo-3"), (5, "algo-3")):
        block = next(b for b in blocks if b.startswith(f"{r} on {h}: last step"))
        assert "allreduce_step (" in block, (r, text)
    assert "mpirun_kit: hang detected at" in out            # in the master's log too
    assert codes == {h: ExitCode.SIGTERM for h in HOSTS}    # no abort with hang_abort_s 0


def test_hang_abort_every_host_exits_hung(sim):
    procs = run_job(sim, [PY, PROG, "hang", "50", "/opt/ml/output"], replace(FAST, hang_abort_s=2.0))
    codes = {h: p.wait(120) for h, p in procs.items()}
    assert codes == {h: ExitCode.HUNG for h in HOSTS}, procs["algo-1"].output()
    failure = (sim.host("algo-1").opt_ml / "output" / "failure").read_text()
    assert "hung: no rank advanced within 2 s of the hang report (timeouts.hang_abort_s)" in failure, failure
    assert "suspect: rank 3 on algo-2" in failure, failure
    for h in ("algo-2", "algo-3"):
        assert "job result from master: exit code 76" in procs[h].output()


def test_slow_but_advancing_rank_never_reported(sim):
    procs = run_job(sim, [PY, PROG, "slow", "6", "/opt/ml/output"])
    codes = {h: p.wait(120) for h, p in procs.items()}
    assert codes == {h: 0 for h in HOSTS}, procs["algo-1"].output()
    assert not report_path(sim).exists(), report_path(sim).read_text() + procs["algo-1"].output()
    assert "hang detected" not in procs["algo-1"].output()


def test_no_progress_program_never_reported_and_timeline_complete(sim, tmp_path):
    # 12 steps of 0.3 s: longer than stall_s, and no rank ever reports a step.
    procs = run_job(sim, [PY, PROG, "none", "12", "/opt/ml/output"])
    codes = {h: p.wait(120) for h, p in procs.items()}
    assert codes == {h: 0 for h in HOSTS}, procs["algo-1"].output()
    assert not report_path(sim).exists()
    assert "hang detected" not in procs["algo-1"].output()

    path = sim.host("algo-1").opt_ml / "output" / "timeline.json"
    data = timeline.load(path)
    assert data["hosts"]["algo-1"]["role"] == "master"
    master = [r["phase"] for r in data["hosts"]["algo-1"]["phases"]]
    assert master == list(timeline.MASTER_PHASES), master
    for h in ("algo-2", "algo-3"):
        phases = [r["phase"] for r in data["hosts"][h]["phases"]]
        assert phases == list(timeline.WORKER_PHASES), (h, phases)
    for h, v in data["hosts"].items():
        ts = [r["t"] for r in v["phases"]]
        monos = [r["mono"] for r in v["phases"]]
        assert ts == sorted(ts) and monos == sorted(monos), (h, v)
    assert sorted(r["rank"] for r in data["ranks"]) == list(range(6))
    assert all(r["started"] <= r["exited"] and r["exit_code"] == 0 for r in data["ranks"])
    started = {h: data["hosts"][h]["phases"][0]["t"] for h in HOSTS}
    mpirun = data["hosts"]["algo-1"]["phases"][3]["t"]
    assert all(mpirun <= r["started"] for r in data["ranks"]) and all(t <= mpirun for t in started.values())
    assert "mpirun_kit: timeline: launch " in procs["algo-1"].output()

    png = tmp_path / "timeline.png"
    cli = subprocess.run([PY, "-m", "mpirun_kit.cli.main", "timeline", str(path), "--png", str(png)],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert "last rank started (rank " in cli.stdout and "mpirun started" in cli.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    js = json.loads(subprocess.run([PY, "-m", "mpirun_kit.cli.main", "timeline", str(path), "--json"],
                                   capture_output=True, text=True, timeout=120).stdout)
    assert set(js["startup_cpu_s"]) == set(HOSTS) and js["launch_s"] > 0


def test_silent_rank_sleeping_while_others_allreduce_is_named_on_3_hosts(sim):
    """Issue 29: no progress report, no output; rank 3 sleeps outside any collective while the 5 others wait in an
    allreduce.  Reported within stall_s + 10 s of every rank waiting, naming rank 3 (before: never reported)."""
    procs = run_job(sim, [PY, SILENT, "sleep", "3", "/opt/ml/output"])
    try:
        for r, h in enumerate(("algo-1", "algo-1", "algo-2", "algo-2", "algo-3", "algo-3")):
            wait_for(sim.host(h).opt_ml / "output" / f"stuck.{r}", Deadline(SYSTEM_CLOCK, 90), procs)
        wait_for(report_path(sim), Deadline(SYSTEM_CLOCK, STALL_S + 10), procs)
        text = report_path(sim).read_text()
    finally:
        codes = stop(procs)
    assert "no rank changed for" in text, text
    assert ("suspect: rank 3 on algo-2: not in a collective: waits in sleep_forever (hang_modes.py:" in text
            and "while ranks 0, 1, 2, 4, 5 wait in Allreduce" in text), text
    assert text.count("\nsuspect: ") == 1, text
    assert codes == {h: ExitCode.SIGTERM for h in HOSTS}    # a report only: the job ran on until stopped


def test_rank_exiting_alone_ends_the_job_with_its_code_on_every_host(sim):
    """Issue 29: rank 3 raises SystemExit(3) while the others wait in a barrier; its MPI_Finalize (mpi4py's exit hook)
    waits for them for ever (an exit the fail-fast hook does not see, unlike sys.exit).  Every host ends with 3
    and the failure names rank 3 (before: a silent hang)."""
    procs = run_job(sim, [PY, SILENT, "raise3", "3", "/opt/ml/output"])
    codes = {h: p.wait(150) for h, p in procs.items()}
    assert codes == {h: 3 for h in HOSTS}, procs["algo-1"].output()
    failure = (sim.host("algo-1").opt_ml / "output" / "failure").read_text()
    assert "root cause: rank 3 on algo-2 exited with code 3" in failure, failure
    assert "suspect: rank 3 on algo-2: called exit and waits in MPI_Finalize" in report_path(sim).read_text()
    for h in ("algo-2", "algo-3"):
        assert "job result from master: exit code 3" in procs[h].output()
