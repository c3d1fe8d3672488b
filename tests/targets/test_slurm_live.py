"""Target slurm against a real Slurm: Debian's 22.05 daemons and munge in a 3-node simulated cluster.

One cluster (slurmctld, slurmdbd with MariaDB for sacct, a slurmd per node) is shared by the test run
(tests/conftest.py's ``slurm_cluster``, which tests/sim/test_slurm.py uses too): its start is a few seconds of
the CI budget.  Jobs use 2 or 3 of its nodes, each with a job name and run directory of its own.  Nothing is
mocked: sbatch, srun --mpi=pmix, Open MPI, the result channel and the rank wrappers all run.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.records import JobRecord, JobState
from mpirun_kit.sim.slurm import ACCOUNT
from mpirun_kit.spec.compile import compile_job
from mpirun_kit.spec.load import load_job_text
from mpirun_kit.targets.slurm import runner as SR, target as ST
from mpirun_kit.targets.base import SubmitOptions
from . import exact_output

pytestmark = pytest.mark.sim
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(slurm_cluster):
    """(SimCluster, SlurmCluster, a directory for run directories): the test run's one Slurm (tests/conftest.py)."""
    return slurm_cluster


def spec(cluster, name: str, command: list[str], *, hosts: int = 2, ppn: int = 2, env: dict | None = None,
         slurm: dict | None = None, timeouts: dict | None = None) -> str:
    sim, _, root = cluster
    target = {"sim": sim.name, "sim_root": str(sim.layout.root), "workdir": str(root / "work"), **(slurm or {})}
    return json.dumps({"apiVersion": "mpirun_kit/v1", "kind": "Job", "name": name,
                       "program": {"command": command}, "resources": {"hosts": hosts, "processes_per_host": ppn},
                       "env": env or {}, "pinning": "none", "target": {"type": "slurm", "slurm": target},
                       **({"timeouts": timeouts} if timeouts else {})})


def prepare(text: str, job_id: str):
    compiled = compile_job(load_job_text(text), python=sys.executable)
    return ST.TARGET.prepare(compiled, SubmitOptions(wait=True, job_id=job_id))


def run(text: str, job_id: str, launch: dict | None = None):
    """Submit ``text`` and wait; ``launch``: LaunchSpec keys replaced in the prepared run's launch-spec.json."""
    dry = prepare(text, job_id)
    if launch:
        path = f"{dry.request.run_dir}/launch-spec.json"
        files = dict(dry.files)
        files[path] = json.dumps({**json.loads(files[path]), **launch}) + "\n"
        dry = dataclasses.replace(dry, files=tuple(files.items()))
    out, err = io.BytesIO(), io.BytesIO()
    outcome = ST.TARGET.run(dry, SubmitOptions(wait=True), out=out, err=err)
    run_dir = Path(dry.request.run_dir)
    return outcome, (run_dir / "slurm.out").read_bytes(), (run_dir / "slurm.err").read_bytes(), dry


def program(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(text))
    return [sys.executable, str(path)]


def sacct(cluster, job_id: str) -> dict[str, tuple[str, str]]:
    sim, slurm, _ = cluster
    res = sim.run(slurm.login, ["sacct", "-j", job_id, "-n", "-P", "-o", "JobID,State,ExitCode"], env=slurm.env())
    return {line.split("|")[0]: (line.split("|")[1], line.split("|")[2]) for line in res.stdout.splitlines() if line}


def left_on_nodes(cluster, marker: str) -> dict[str, str]:
    """Processes whose command line holds ``marker`` on any node (each node's own PID namespace)."""
    sim, _, _ = cluster
    found = {}
    for h in sim.hosts:
        res = sim.run(h.name, ["pgrep", "-af", marker])
        if res.stdout.strip():
            found[h.name] = res.stdout.strip()
    return found


MPI_PROGRAM = """\
import socket
from mpi4py import MPI
c = MPI.COMM_WORLD
total = c.allreduce(c.Get_rank() + 1)
print(f"rank {c.Get_rank()} of {c.Get_size()} on {socket.gethostname()} sum {total}", flush=True)
"""


def test_mpi4py_job_on_3_nodes_every_rank_prints_and_succeeds(cluster, tmp_path):
    outcome, out, err, _ = run(spec(cluster, "mpi3", program(tmp_path, MPI_PROGRAM), hosts=3), "a1")
    assert outcome.exit_code == 0, err.decode(errors="replace")[-2000:]
    lines = set(out.decode().splitlines())
    for rank in range(6):
        host = f"algo-{rank // 2 + 1}"
        assert f"[{rank} {host}] rank {rank} of 6 on {host} sum 21" in lines


def test_every_ranks_output_is_byte_exact(cluster, tmp_path):
    # exact_output's program, with the rank from PMIx (srun sets no OMPI_ variable before MPI_Init).
    prog = exact_output.PROGRAM.replace('os.environ["OMPI_COMM_WORLD_RANK"]', 'os.environ["PMIX_RANK"]')
    outcome, out, err, dry = run(spec(cluster, "exact", program(tmp_path, prog)), "a2")
    assert outcome.exit_code == 0, err.decode(errors="replace")[-2000:]
    exact_output.assert_exact(out, err, {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"})
    assert not (Path(dry.request.run_dir) / "job-secret").exists()   # the job's secret ended with it


FAILING = """\
import os, signal, sys, time
from mpi4py import MPI
c = MPI.COMM_WORLD
if c.Get_rank() == int(os.environ["BAD_RANK"]):
    if os.environ["HOW"] == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
"""


def test_a_rank_exiting_3_is_the_jobs_result_whatever_srun_and_sacct_say(cluster, tmp_path):
    outcome, _, err, dry = run(spec(cluster, "exit3", program(tmp_path, FAILING), env={"BAD_RANK": "1", "HOW": "exit"}),
                               "a3")
    assert outcome.exit_code == 3
    assert outcome.source == "job"
    assert outcome.root_cause == {"rank": 1, "host": "algo-1", "exit_code": 3, "signal": None}
    assert "rank 1 on algo-1 exited with code 3" in outcome.reason
    # Slurm's own view: srun's step was cancelled by a signal (its 3 only in a stderr line), the batch script
    # (ours) exited 3, so the job is FAILED 3:0, never COMPLETED.
    job_id = (Path(dry.request.run_dir) / "slurm-job-id").read_text().strip()
    steps = sacct(cluster, job_id)
    ranks_step = steps[f"{job_id}.1"]
    assert ranks_step[1] != "3:0" and ranks_step[0] in ("CANCELLED", "FAILED"), steps
    assert steps[job_id] == ("FAILED", "3:0"), steps


def test_a_rank_killed_by_a_signal_is_named(cluster, tmp_path):
    outcome, _, err, _ = run(spec(cluster, "killed", program(tmp_path, FAILING), hosts=3, ppn=1,
                                  env={"BAD_RANK": "2", "HOW": "kill"}), "a4")
    assert outcome.root_cause == {"rank": 2, "host": "algo-3", "exit_code": None, "signal": "SIGKILL"}, \
        err.decode(errors="replace")[-2000:]
    assert outcome.exit_code == 137
    assert "rank 2 on algo-3" in outcome.reason and "SIGKILL" in outcome.reason


SLEEPER = """\
import signal, sys, time
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
print("started", flush=True)
time.sleep(300)  # marker-sleeper
"""


def submit_nowait(cluster, tmp_path, name: str, job_id: str):
    dry = prepare(spec(cluster, name, program(tmp_path, SLEEPER)), job_id)
    runner = SR.runner_for(dry.request.where)
    from mpirun_kit.exec.sshkeys import SECRET_BYTES, format_secret

    slurm_id = ST.submit(dry, runner, format_secret(os.urandom(SECRET_BYTES)))
    out = Path(dry.request.run_dir) / "slurm.out"
    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

    end = Deadline(SYSTEM_CLOCK, 60)
    while not (out.exists() and out.read_text().count("started") == 4):
        assert not end.expired(), f"the job never started: {out.read_text() if out.exists() else ''}"
        SYSTEM_CLOCK.sleep(0.2)
    return dry, runner, slurm_id


def test_scancel_ends_the_job_with_nothing_left_on_any_node(cluster, tmp_path):
    dry, runner, slurm_id = submit_nowait(cluster, tmp_path, "scancel", "a5")
    assert left_on_nodes(cluster, "marker-sleeper") or True
    code, _, err = runner.run(["scancel", slurm_id])
    assert code == 0, err
    ST.cancel_job(runner, slurm_id)   # waits for Slurm to end it
    assert left_on_nodes(cluster, str(tmp_path / "prog.py")) == {}
    res = ST.read_result(runner, dry.request.run_dir)
    assert res.exit_code == 143      # the master was stopped by SIGTERM and said so


def test_target_cancel_ends_the_job_and_status_says_cancelled(cluster, tmp_path):
    dry, runner, slurm_id = submit_nowait(cluster, tmp_path, "cancel", "a6")
    record = JobRecord(job_id="a6", name="cancel", target="slurm", native=slurm_id,
                       details={"where": dry.request.where, "run_dir": dry.request.run_dir})
    assert ST.TARGET.describe(record).state == JobState.RUNNING
    status = ST.TARGET.cancel(record)
    assert left_on_nodes(cluster, str(tmp_path / "prog.py")) == {}
    # A cancel is a stop, not a rank's failure: SIGTERM to the batch shell, the master stops every rank.
    assert (status.state, status.exit_code, status.root_cause) == (JobState.CANCELLED, 143, None), status
    assert "stopped by SIGTERM" in status.reason
    # Slurm's own accounting says what a plain scancel gives: CANCELLED, not FAILED (issue 40 item 5).
    job = sacct(cluster, slurm_id)[slurm_id]
    assert job[0].startswith("CANCELLED"), job


def test_status_of_a_finished_job_holds_the_ranks_code_not_slurms(cluster, tmp_path):
    outcome, _, _, dry = run(spec(cluster, "status", program(tmp_path, FAILING), env={"BAD_RANK": "3", "HOW": "exit"}),
                             "a7")
    slurm_id = (Path(dry.request.run_dir) / "slurm-job-id").read_text().strip()
    record = JobRecord(job_id="a7", name="status", target="slurm", native=slurm_id,
                       details={"where": dry.request.where, "run_dir": dry.request.run_dir})
    status = ST.TARGET.describe(record)
    assert (status.state, status.exit_code, status.root_cause) == (
        JobState.FAILED, 3, {"rank": 3, "host": "algo-2", "exit_code": 3, "signal": None})
    logs = list(ST.TARGET.logs(record, rank=0))
    assert logs == [] or all(line.startswith("[0 ") for line in logs)


CPU_BIND = """\
import os
print("bind", os.environ.get("SLURM_CPU_BIND"), os.environ.get("SBATCH_DEBUG"), os.environ.get("PMIX_MYSTERY"),
      flush=True)
"""


class InheritingRunner(SR.SimRunner):
    """A login shell that inherited a parent allocation's variables, running sbatch without our scrub."""

    def __init__(self, where):
        super().__init__(where["name"], where["root"])
        self.env = {**self.env, "SLURM_CPU_BIND": "verbose,map_cpu:0", "SBATCH_DEBUG": "1",
                    "PMIX_MYSTERY": "stale"}

    def scrubbed(self, argv, **kw):
        return self.run(argv, **kw)


def test_an_inherited_slurm_cpu_bind_does_not_reach_the_ranks(cluster, tmp_path):
    dry = prepare(spec(cluster, "cpubind", program(tmp_path, CPU_BIND)), "a8")
    runner = InheritingRunner(dry.request.where)
    from mpirun_kit.exec.sshkeys import SECRET_BYTES, format_secret

    slurm_id = ST.submit(dry, runner, format_secret(os.urandom(SECRET_BYTES)))
    ST.follow(dry, runner, slurm_id, out=io.BytesIO(), err=io.BytesIO())
    out = (Path(dry.request.run_dir) / "slurm.out").read_text()
    assert ST.read_result(runner, dry.request.run_dir).exit_code == 0, out
    lines = [line for line in out.splitlines() if " bind " in line]
    assert len(lines) == 4 and all(line.endswith("bind None None None") for line in lines), out


def test_a_missing_partition_is_one_line(cluster, tmp_path):
    dry = prepare(spec(cluster, "nopart", ["true"], slurm={"partition": "nosuch"}), "b1")
    with pytest.raises(SpecError) as e:
        ST.TARGET.run(dry, SubmitOptions(wait=True))
    assert str(e.value) == "target.slurm.partition: the cluster has no partition 'nosuch'; its partitions are debug"


def test_a_job_too_large_for_the_cluster_is_one_line(cluster, tmp_path):
    dry = prepare(spec(cluster, "large", ["true"], hosts=4), "b2")
    with pytest.raises(SpecError) as e:
        ST.TARGET.run(dry, SubmitOptions(wait=True))
    assert str(e.value) == ("resources.hosts: the job needs 4 nodes, but partition 'debug' has 3 "
                            "(algo-1,algo-2,algo-3); lower resources.hosts or choose a larger partition")


def test_an_unknown_account_is_one_line(cluster, tmp_path):
    dry = prepare(spec(cluster, "acct", ["true"], slurm={"account": "nosuchacct"}), "b3")
    with pytest.raises(SpecError) as e:
        ST.TARGET.run(dry, SubmitOptions(wait=True))
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("target.slurm.account: Slurm refused account 'nosuchacct' (sbatch: error: ")
    assert "Invalid account" in str(e.value)
    # The account the cluster knows is accepted.
    outcome, _, _, _ = run(spec(cluster, "acctok", ["true"], slurm={"account": ACCOUNT}), "b4")
    assert outcome.exit_code == 0


CHECKPOINTER = """\
import os, signal, sys, time
def stop(*_):
    print("checkpoint written by rank", os.environ["PMIX_RANK"], flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("training", flush=True)
time.sleep(300)
"""


def signal_batch_once_every_rank_trains(dry, signal: str, ranks: int = 4):
    """Send ``signal`` to the batch shell only, as ``--signal=B:SIG@N`` does, once every rank is up.

    Slurm's own time-limit signal comes 10-40 s after the start (slurmctld checks every ~30 s), whatever
    the ranks are doing: on a loaded machine it came while Python was still starting the ranks, before
    their SIGTERM handlers existed (the CI run at 6fc6e76).  ``scancel --batch --signal`` is the same
    signal, from the same daemon, to the same shell, at a moment the test chooses.
    """
    import threading

    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

    run_dir = Path(dry.request.run_dir)
    runner = SR.runner_for(dry.request.where)
    sent = []

    def watch():
        end = Deadline(SYSTEM_CLOCK, 120)
        out, id_file = run_dir / "slurm.out", run_dir / "slurm-job-id"
        while not end.expired():
            if id_file.exists() and out.exists() and out.read_text().count("training") == ranks:
                sent.append(runner.run(["scancel", "--batch", f"--signal={signal}", id_file.read_text().strip()]))
                return
            SYSTEM_CLOCK.sleep(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, sent


def test_the_signal_before_the_time_limit_checkpoints_every_rank_and_the_result_says_timeout(cluster, tmp_path):
    # The script asks Slurm for --signal=B:USR1@60 (a 5-minute limit: Slurm's own would come after ours);
    # USR1 reaches the batch shell once every rank trains, the script's trap stops the master and every
    # rank's SIGTERM handler writes its checkpoint.
    dry = prepare(spec(cluster, "timelimit", program(tmp_path, CHECKPOINTER),
                       slurm={"time": "5", "signal": "USR1@60"}), "c1")
    assert "#SBATCH --signal=B:USR1@60" in dry.render()
    thread, sent = signal_batch_once_every_rank_trains(dry, "USR1")
    outcome = ST.TARGET.run(dry, SubmitOptions(wait=True), out=io.BytesIO(), err=io.BytesIO())
    thread.join(5)
    run_dir = Path(dry.request.run_dir)
    out, err = (run_dir / "slurm.out").read_bytes(), (run_dir / "slurm.err").read_bytes()
    assert sent and sent[0][0] == 0, (sent, err.decode()[-2000:])
    lines = out.decode().splitlines()
    assert sorted(line for line in lines if "checkpoint written" in line) == [
        f"[{r} algo-{r // 2 + 1}] checkpoint written by rank {r}" for r in range(4)], err.decode()[-2000:]
    assert (outcome.exit_code, outcome.source, outcome.root_cause) == (124, "platform", None), outcome
    assert "USR1 ahead of the time limit" in outcome.reason
    assert (run_dir / "attempt-0" / "signal").read_text().strip() == "USR1"


FLAKY = """\
import os, sys
from pathlib import Path
marker = Path(os.environ["MARKER"]) / f"ran-{os.environ['PMIX_RANK']}"
first = not marker.exists()
marker.touch()
print("attempt", "first" if first else "again", flush=True)
if first and os.environ["PMIX_RANK"] == "1":
    os._exit(3)
"""


def test_retries_requeue_the_job_and_slurm_restart_count_counts_them(cluster, tmp_path):
    outcome, out, err, dry = run(spec(cluster, "retry", program(tmp_path, FLAKY), env={"MARKER": str(tmp_path)},
                                      slurm={"requeue": True}).replace('"pinning"', '"retries": 1, "pinning"'), "c2")
    run_dir = Path(dry.request.run_dir)
    assert outcome.exit_code == 0, err.decode()[-3000:]
    assert outcome.attempts == 2
    assert (run_dir / "attempt-0" / "exit_code").read_text().strip() == "3"
    assert (run_dir / "attempt-1" / "exit_code").read_text().strip() == "0"
    assert "requeueing (SLURM_RESTART_COUNT counts it)" in err.decode()
    assert out.decode().count("attempt again") == 4


RESUMER = """\
import os, sys, time
from pathlib import Path
ckpt = Path(os.environ["MARKER"]) / "checkpoint"
start = int(ckpt.read_text()) if ckpt.exists() else 0
rank = os.environ["PMIX_RANK"]
print("resumed from step", start, flush=True) if start else print("fresh start", flush=True)
# The first attempt trains until its node fails (the test fails it at step 2); a resumed one takes 2 more steps.
for step in range(start, start + 2 if start else 10000):
    if rank == "0":   # atomically: the other rank, and the test, read it meanwhile
        (ckpt.parent / "checkpoint.tmp").write_text(str(step))
        (ckpt.parent / "checkpoint.tmp").replace(ckpt)
    time.sleep(0.5)
print("done at step", step + 1, flush=True)
"""


def test_a_node_failure_requeues_the_job_and_it_resumes_from_its_checkpoint(cluster, tmp_path):
    sim, slurm, _ = cluster
    # Slurm finds the node dead (~17 s: sim/slurm.py's SlurmdTimeout and MessageTimeout) and requeues the job
    # itself (--requeue); the master's own verdict on the silent worker (timeouts.worker_silence_s) is set later
    # than that, so Slurm's path is the one this test takes every time: a requeue by the batch script instead
    # could start the next attempt on the dead node, which Slurm would still count as up.
    dry = prepare(spec(cluster, "nodefail", program(tmp_path, RESUMER), ppn=1, env={"MARKER": str(tmp_path)},
                       slurm={"requeue": True}, timeouts={"worker_silence_s": 120}
                       ).replace('"pinning"', '"retries": 1, "pinning"'), "c3")
    runner = SR.runner_for(dry.request.where)
    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
    from mpirun_kit.exec.sshkeys import SECRET_BYTES, format_secret

    slurm_id = ST.submit(dry, runner, format_secret(os.urandom(SECRET_BYTES)))
    ckpt = tmp_path / "checkpoint"
    end = Deadline(SYSTEM_CLOCK, 60)
    while not (ckpt.exists() and int(ckpt.read_text()) >= 2):
        assert not end.expired(), "the job never reached step 2"
        SYSTEM_CLOCK.sleep(0.1)
    # The second node fails: its slurmd and everything of the job there die at once (the host itself stays, so
    # its slurmd can come back for the tests after this one).  Slurm marks the node DOWN and requeues the job;
    # the next attempt runs on the two nodes left and resumes from the checkpoint.
    victim = "algo-2"
    for pattern in ("slurmd", "slurmstepd", "mpirun_kit.cli.main", "mpirun_kit.rank", str(tmp_path / "prog.py")):
        sim.run(victim, ["pkill", "-KILL", "-f", pattern])
    try:
        job = ST.follow(dry, runner, slurm_id, out=io.BytesIO(), err=io.BytesIO())
        outcome = ST.outcome_for(dry, runner, slurm_id, job, started=0.0)
    finally:
        slurm.start_slurmd(victim)   # back, and idle, for the tests after this one
        slurm.wait_idle()
    run_dir = Path(dry.request.run_dir)
    out = (run_dir / "slurm.out").read_text()
    assert outcome.exit_code == 0, out + (run_dir / "slurm.err").read_text()[-3000:]
    assert outcome.attempts == 2
    resumed = int(out.split("resumed from step ")[1].split()[0])
    # (The failed node's rank may have lost its line with its slurmstepd; rank 0's, which checkpointed, is there.)
    assert resumed >= 2 and "[0 algo-1] fresh start" in out.splitlines(), out
    assert f"done at step {resumed + 2}" in out and out.count("done at step") == 2, out
    # Slurm's own record of it: the first run ended NODE_FAIL, the second COMPLETED.
    res = sim.run(slurm.login, ["sacct", "-j", slurm_id, "--duplicates", "-X", "-n", "-P", "-o", "State"],
                  env=slurm.env())
    assert res.stdout.split() == ["NODE_FAIL", "COMPLETED"], res


def test_mpirun_as_the_second_launch_flavour_starts_its_daemons_with_srun(cluster, tmp_path):
    # launch: mpirun: the master runs mpirun inside the allocation, for images whose MPI lacks PMIx; mpirun reads
    # the batch step's own SLURM_* variables, so Open MPI's plm:slurm starts its orted daemons with srun (no ssh
    # between the nodes); the result is the same.  plm_base_verbose makes mpirun say which launcher it chose.
    # No worker's sshd is needed: the launch spec's ssh port is one nothing listens on (the sim nodes run sshd
    # on 22), with a 4 s sshd deadline (2 s + 1 s per host).  Before daemons_via the master waited for that
    # port and failed the job as unreachable.
    outcome, out, err, dry = run(spec(cluster, "mpirun", program(tmp_path, MPI_PROGRAM), slurm={"launch": "mpirun"},
                                      env={"OMPI_MCA_plm_base_verbose": "5"},
                                      timeouts={"ssh_ready_s": 2}), "c4",
                                 launch={"ssh_port": 9})
    assert outcome.exit_code == 0, err.decode(errors="replace")[-2000:]
    launch = json.loads(dict(dry.files)[f"{dry.request.run_dir}/launch-spec.json"])
    assert launch["mpi_flavour"] == "auto" and launch["mpi_options"] == []   # mpirun, detected on the node
    assert launch["daemons_via"] == "slurm" and launch["ssh_port"] == 9
    assert b"waiting for sshd" not in err, err.decode(errors="replace")[-2000:]
    lines = set(out.decode().splitlines())
    assert all(f"[{r} algo-{r // 2 + 1}] rank {r} of 4 on algo-{r // 2 + 1} sum 10" in lines for r in range(4)), out
    said = (out + err).decode(errors="replace")
    launched = [line for line in said.splitlines() if "plm:slurm: final top-level argv" in line]
    assert launched, said[-3000:]
    argv = said.split("plm:slurm: final top-level argv:", 1)[1].split("\n", 2)[1].split()
    assert argv[0] == "srun" and "orted" in argv and "--nodelist=algo-2" in argv, argv
    assert "plm:rsh" not in said


HELLO = """\
import os, socket
print("hello from rank", os.environ["PMIX_RANK"], "on", socket.gethostname(), flush=True)
"""


def test_submit_over_ssh_to_a_login_node(cluster, tmp_path):
    # target.slurm.login: sbatch and the other clients run on a login node over ssh (exec/remote.py, host key
    # checked).  The submit runs inside algo-3, as on a machine of the cluster's network, and reaches algo-1's
    # sshd as root with the cluster's key; on algo-1, as on any login node, Slurm's clients read /etc/slurm.
    sim, _, root = cluster
    host3 = sim.host("algo-3")
    text = json.loads(spec(cluster, "login", program(tmp_path, HELLO), ppn=1))
    text["target"]["slurm"] = {"login": "root@algo-1", "identity_file": str(sim.layout.cluster_key),
                               "known_hosts": str(host3.ssh_dir / "known_hosts"), "python": sys.executable,
                               "workdir": str(root / "work")}
    job = tmp_path / "login.yaml"
    job.write_text(json.dumps(text))
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
           "MPIRUN_KIT_STATE_DIR": str(tmp_path / "state"), "LANG": "C.UTF-8"}
    res = sim.run("algo-3", [sys.executable, "-m", "mpirun_kit.cli.main", "submit", str(job), "--wait", "--json"],
                  env=env, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(res.stdout.splitlines()[-1])
    assert (result["exit_code"], result["target"]) == (0, "slurm"), result
    run_dir = next((root / "work").glob(f"login-{result['job_id']}"))
    assert sorted((run_dir / "slurm.out").read_text().splitlines()) == [
        "[0 algo-1] hello from rank 0 on algo-1", "[1 algo-2] hello from rank 1 on algo-2"]


SESSIONS = """\
import json, sys, time
from mpirun_kit.targets.slurm import runner as SR, target as ST
where = json.loads(sys.argv[1])
count = ["pgrep", "-c", "-f", "^sshd: root@notty"]   # one sshd session process per connection to algo-1
first = SR.runner_for(where)
first.run(["true"]), first.run(["true"])              # two commands, one connection
with SR.runner_for(where) as second:
    both = int(second.run(count)[1])
    first.close()
    end = time.monotonic() + 30
    while int(second.run(count)[1]) != 1 and time.monotonic() < end:
        time.sleep(0.1)
    after_close = int(second.run(count)[1])
end = time.monotonic() + 30
while int(SR.runner_for(where).run(count)[1]) != 1 and time.monotonic() < end:   # this one's own only
    time.sleep(0.1)
print(json.dumps({"both": both, "after_close": after_close}))
"""


def test_a_login_runner_keeps_one_ssh_connection_and_closes_it(cluster, tmp_path):
    # The login node's sshd sessions, counted on it: a runner's commands share one connection, and close()
    # (or the end of a with block, as the target's run/describe/cancel/logs use it) ends that connection.
    sim, _, _ = cluster
    where = {"kind": "ssh", "user": "root", "host": "algo-1", "port": 22, "identity_file": str(sim.layout.cluster_key),
             "known_hosts": str(sim.host("algo-3").ssh_dir / "known_hosts"), "connect_timeout_s": 10.0}
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    res = sim.run("algo-3", [sys.executable, "-c", SESSIONS, json.dumps(where)], env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout) == {"both": 2, "after_close": 1}
    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

    end = Deadline(SYSTEM_CLOCK, 30)
    left = sim.run("algo-1", ["pgrep", "-af", "^sshd: root@notty"])
    while left.stdout.strip() and not end.expired():   # the last runners' connections ended with their process
        SYSTEM_CLOCK.sleep(0.1)
        left = sim.run("algo-1", ["pgrep", "-af", "^sshd: root@notty"])
    assert left.stdout.strip() == "", left.stdout


def test_submit_names_its_job_and_detach_returns_with_slurms_id_for_status_at_once(cluster, tmp_path, capsys):
    """Issue 40 item 5: a plain submit says the mpirun_kit job id (not only Slurm's); ``submit --detach`` returns
    only once the record has Slurm's id, so ``status`` right after it answers; a host whose Slurm clients cannot
    reach the cluster (this machine's own, without the sim's slurm.conf) says so instead of "gone" or lost."""
    import shutil

    from mpirun_kit.cli.main import main
    from mpirun_kit.records import RecordStore
    from mpirun_kit.service.requests import SubmitRequest
    from mpirun_kit.service.runner import JobService
    from mpirun_kit.errors import ClusterError

    job = tmp_path / "ids.yaml"
    job.write_text(spec(cluster, "ids", program(tmp_path, SLEEPER), hosts=1, ppn=1))
    svc = JobService(RecordStore(Path(os.environ["MPIRUN_KIT_STATE_DIR"])))
    assert main(["submit", str(job)]) == 0
    (plain,) = svc.list()
    assert f"as mpirun_kit job {plain.job_id}" in capsys.readouterr().err
    svc.cancel(plain.job_id)
    handle = svc.submit(SubmitRequest(spec=str(job), detach=True))
    rec = svc.get(handle)
    slurm_id = ST.job_id_of(rec)        # at once: the detached submit returned with it
    assert svc.describe(handle).state in (JobState.PENDING, JobState.RUNNING)
    if shutil.which("squeue"):
        outside = dataclasses.replace(rec, details={**rec.details, "where": {"kind": "local"}})
        with pytest.raises(ClusterError, match=f"could not ask Slurm about job {slurm_id} from this host"):
            ST.TARGET.describe(outside)
    status, _ = svc.cancel(handle)
    assert status.state == JobState.CANCELLED, status


TOGETHER = """\
import sys, time
from pathlib import Path
from mpi4py import MPI
c = MPI.COMM_WORLD
here, me = Path(sys.argv[1]), sys.argv[2]
if c.Get_rank() == 0:                       # both jobs' masters on one node at once, or this job fails (exit 9)
    (here / f"started-{me}").touch()
    deadline = time.monotonic() + 90
    while len(list(here.glob("started-*"))) < 2:
        if time.monotonic() > deadline:
            sys.exit(9)
        time.sleep(0.1)
c.Barrier()
print(f"rank {c.Get_rank()} of {me} done", flush=True)
"""


def test_two_jobs_of_one_spec_share_a_node_at_once(cluster, tmp_path):
    """Issue 40 item 1: two jobs whose masters share a node (2 x 1 on algo-1 and algo-2, Slurm's nodes not
    exclusive) run at once.  At 51b0ea4 the result channel's port was a fixed 29411, so the second job's master
    failed in 1.5 s with exit 70 ('cannot open the result channel on ...:29411 (Address already in use)'); each
    run's port now comes from its own job secret.  Each job's rank 0 waits until both have started, so the two
    really overlap (a job that never sees the other exits 9)."""
    import threading

    meet = tmp_path / "meet"
    meet.mkdir()
    prog = program(tmp_path, TOGETHER)
    outcomes = {}

    def one(name: str) -> None:
        text = spec(cluster, "together", prog + [str(meet), name], hosts=2, ppn=1,
                    slurm={"sbatch_options": ["--nodelist=algo-1,algo-2"]})
        outcomes[name] = run(text, name)

    threads = [threading.Thread(target=one, args=(n,)) for n in ("tg1", "tg2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert sorted(outcomes) == ["tg1", "tg2"], outcomes
    for name, (outcome, out, err, _) in outcomes.items():
        assert outcome.exit_code == 0, (name, err.decode(errors="replace")[-2000:])
        lines = set(out.decode().splitlines())
        assert f"[0 algo-1] rank 0 of {name} done" in lines and f"[1 algo-2] rank 1 of {name} done" in lines, out
