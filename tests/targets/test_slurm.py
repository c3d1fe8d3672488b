"""targets/slurm/ without a cluster: Slurm's JSON of both shapes, the batch script as a value, the checks.

The JSON samples (tests/targets/slurm_json/): ``*-22.05.json`` were recorded from Debian's Slurm 22.05.8 on
the simulated cluster (``sim up --slurm --accounting``: a 2-node job ``sbatch --job-name='demo job' --wrap
'srun -N2 sleep 3; exit 3'``; sacct's ``exit_code`` says SUCCESS/0 for that job).  ``*-23.11.json`` were
written by hand from the documented 23.11 shape (data_parser v0.0.40: ``job_state`` a list, numbers as
``{set, infinite, number}``), with a foreign job name and a state this code does not know: no 23.11 cluster
runs here.  The live cluster's tests are in test_slurm_live.py.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import shlex
import socket
import subprocess
from pathlib import Path

import pytest
from clock_kit import FakeClock

from mpirun_kit.errors import ClusterError, SpecError
from mpirun_kit.records import JobState
from mpirun_kit.spec.compile import compile_job
from mpirun_kit.spec.load import load_job_text
from mpirun_kit.targets import get_target
from mpirun_kit.targets.slurm import accounting as SA, discovery as SD, runner as SR, script as SS, target as ST

DATA = Path(__file__).with_name("slurm_json")


def sample(name: str) -> str:
    return (DATA / f"{name}.json").read_text()


def test_squeue_22_05_state_is_a_string():
    (job,) = SA.parse_jobs_json(sample("squeue-22.05"))
    assert (job.job_id, job.name, job.state, job.job_state, job.nodes) == ("1", "demo job", "RUNNING",
                                                                            JobState.RUNNING, "algo-[1-2]")


def test_sacct_22_05_says_success_for_a_job_that_exited_3():
    (job,) = SA.parse_jobs_json(sample("sacct-22.05"))
    # What Slurm 22.05 said about a batch script that exited 3: the state is right, the exit code is not.
    assert (job.state, job.job_state, job.exit_code) == ("FAILED", JobState.FAILED, 0)


def test_squeue_23_11_lists_foreign_names_and_unknown_states_without_crashing():
    jobs = {j.job_id: j for j in SA.parse_jobs_json(sample("squeue-23.11"))}
    assert jobs["41"].state == "RUNNING" and jobs["41"].restarts == 1
    assert jobs["42"].name == "  weird\u2603 name; rm -rf /" and jobs["42"].job_state == JobState.PENDING
    assert jobs["42"].exit_code is None and jobs["42"].reason == "BeginTime"
    assert jobs["43"].state == "SOME_NEW_STATE" and not jobs["43"].known_state
    assert jobs["43"].job_state == JobState.RUNNING      # listed by squeue: it has not ended


def test_sacct_23_11_numbers_and_signals():
    jobs = {j.job_id: j for j in SA.parse_jobs_json(sample("sacct-23.11"))}
    assert (jobs["41"].state, jobs["41"].exit_code, jobs["41"].signal) == ("FAILED", 3, None)
    assert (jobs["44"].state, jobs["44"].job_state, jobs["44"].exit_code, jobs["44"].signal) == (
        "OUT_OF_MEMORY", JobState.FAILED, None, 9)


@pytest.mark.parametrize("text", ['{"jobs": [{"job_id": "x"}, 7, {"job_id": 5, "job_state": null}]}',
                                  '{"jobs": null}', '[]', '{"jobs": [{"job_id": {"set": false}}]}'])
def test_odd_json_never_crashes(text):
    jobs = SA.parse_jobs_json(text)
    assert all(j.job_id.isdigit() for j in jobs)


def test_not_json_is_one_clear_error():
    with pytest.raises(ClusterError, match="Slurm gave no JSON"):
        SA.parse_jobs_json("squeue: error: unrecognized option '--json'")


def test_sacct_text_fallback():
    jobs = SA.parse_sacct_text("12|train|FAILED|3:0|algo-[1-2]\n12.batch|batch|FAILED|3:0|algo-1\n"
                              "13|x|CANCELLED by 0|0:15|\n")
    assert [(j.job_id, j.state, j.exit_code, j.signal) for j in jobs] == [
        ("12", "FAILED", 3, None), ("13", "CANCELLED", 0, 15)]


def test_sinfo_json_and_text():
    (part,) = SA.parse_sinfo_json(sample("sinfo-22.05"))
    assert (part.name, part.nodes) == ("debug", ("algo-1", "algo-2"))
    parts = SA.parse_sinfo_text("debug* algo-1\ndebug* algo-2\ngpu algo-2\n")
    assert [(p.name, p.nodes, p.default) for p in parts] == [("debug", ("algo-1", "algo-2"), True),
                                                               ("gpu", ("algo-2",), False)]


SPEC = """\
apiVersion: mpirun_kit/v1
kind: Job
name: train
program: {command: [python3, "it's a script.py", --flag, "a b"]}
resources: {hosts: 2, processes_per_host: 4}
target:
  type: slurm
  slurm:
    partition: gpu
    account: research
    time: "1:00:00"
    gpus_per_node: 8
    exclusive: true
    container_image: nvcr.io#nvidia/pytorch:24.01-py3
    container_mounts: [/fsx:/fsx]
    sbatch_options: ["--constraint=p5 & efa", --mail-type=END]
    requeue: true
    signal: USR1@90
    workdir: /fsx/jobs
retries: 2
"""


def dry_of(text: str = SPEC, **choices):
    compiled = compile_job(load_job_text(text), python="python3")
    return get_target("slurm").dryrun(compiled, **{"run_id": "train-1", "python": "python3", **choices})


def test_the_script_is_shown_whole_and_argv_items_are_quoted_once():
    dry = dry_of()
    files = dict(dry.files)
    script = files["/fsx/jobs/train-1/batch.sh"]
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --account=research", "#SBATCH --time=1:00:00",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --exclusive", "#SBATCH --requeue",
                 "#SBATCH --signal=B:USR1@90", "#SBATCH '--constraint=p5 & efa'", "#SBATCH --mail-type=END"):
        assert line in script.splitlines()
    # The rendered text is what --dry-run prints, the script included.
    assert "--- file /fsx/jobs/train-1/batch.sh" in dry.render()
    # The program's argv travels in the LaunchSpec as a list (never a shell string); the pyxis options reach srun.
    import json
    spec = json.loads(files["/fsx/jobs/train-1/launch-spec.json"])
    assert spec["program"] == ["python3", "it's a script.py", "--flag", "a b"]
    assert spec["mpi_flavour"] == "srun" and spec["daemons_via"] == "slurm"
    assert spec["mpi_options"] == ["--container-image=nvcr.io#nvidia/pytorch:24.01-py3", "--container-mounts=/fsx:/fsx"]
    # The entrypoint argv is quoted once, at the script boundary.
    ep = next(line for line in script.splitlines() if line.startswith("ep=("))
    assert shlex.split(ep[len("ep=("):-len(' --hosts "$hosts")')]) == [
        "python3", "-m", "mpirun_kit.cli.main", "entrypoint", "--no-progress", "--no-sshd", "--spec",
        "/fsx/jobs/train-1/launch-spec.json", "--secret-file", "/fsx/jobs/train-1/job-secret", "--job", "train"]
    # retries with requeue: the script requeues itself after a retryable failure.
    assert 'if [ "$attempt" -lt 2 ]' in script and 'scontrol requeue "$SLURM_JOB_ID"' in script


def test_launch_mpirun_keeps_mpirun_and_lets_slurm_start_its_daemons():
    # mpirun inside the allocation: the flavour detected on the node, the allocation's variables forwarded
    # to it, and no wait for the workers' sshd (its daemons start with srun: LaunchPlan.worker_sshd)
    import json
    text = SPEC.replace("    workdir: /fsx/jobs", "    workdir: /fsx/jobs\n    launch: mpirun")
    # pyxis' image reaches only srun's own step: with mpirun the ranks would run outside it
    with pytest.raises(SpecError, match=r"target.slurm.container_image 'nvcr.io#nvidia/pytorch:24.01-py3' needs "
                                        r"launch: srun .* Set target.slurm.launch: srun, or drop container_image"):
        dry_of(text)
    dry = dry_of(text.replace("    container_image: nvcr.io#nvidia/pytorch:24.01-py3\n", ""))
    spec = json.loads(dict(dry.files)["/fsx/jobs/train-1/launch-spec.json"])
    assert (spec["mpi_flavour"], spec["daemons_via"], dry.request.launch) == ("auto", "slurm", "mpirun")
    assert {"SLURM_JOB_ID", "SLURM_NODELIST"} <= set(spec["env_forward"])


#: what Slurm 22.05 set in the batch step of `sbatch -N2 --ntasks-per-node=2` on the sim cluster (recorded there).
BATCH_STEP_ENV = {
    "SLURMD_NODENAME": "algo-1", "SLURM_CLUSTER_NAME": "simc1", "SLURM_CONF": "/r/algo-1/slurm/etc/slurm.conf",
    "SLURM_CPUS_ON_NODE": "2", "SLURM_GTIDS": "0", "SLURM_JOBID": "1", "SLURM_JOB_CPUS_PER_NODE": "2(x2)",
    "SLURM_JOB_GID": "0", "SLURM_JOB_ID": "1", "SLURM_JOB_NAME": "b.sh", "SLURM_JOB_NODELIST": "algo-[1-2]",
    "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_PARTITION": "debug", "SLURM_JOB_UID": "0", "SLURM_JOB_USER": "root",
    "SLURM_LOCALID": "0", "SLURM_NNODES": "2", "SLURM_NODEID": "0", "SLURM_NODELIST": "algo-[1-2]",
    "SLURM_NODE_ALIASES": "(null)", "SLURM_NPROCS": "4", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_PRIO_PROCESS": "0", "SLURM_PROCID": "0", "SLURM_SUBMIT_DIR": "/", "SLURM_SUBMIT_HOST": "algo-1",
    "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_TASK_PID": "64", "SLURM_TOPOLOGY_ADDR": "algo-1",
    "SLURM_TOPOLOGY_ADDR_PATTERN": "node", "SLURM_WORKING_CLUSTER": "simc1:algo-1:6817:9728:109"}


def test_the_script_scrubs_inherited_slurm_variables_but_keeps_this_jobs():
    """The script's own scrub, run by bash in a batch step's environment (recorded above) that a parent allocation
    and the submitting shell added to: every variable Slurm set for the job stays (mpirun's plm:slurm and srun read
    them), everything else of SLURM_*, SBATCH_*, PMIX_* goes."""
    script = dict(dry_of().files)["/fsx/jobs/train-1/batch.sh"]
    lines = script.splitlines()
    start = lines.index("for v in $(compgen -e); do")
    scrub = "\n".join(lines[start:lines.index("done", start) + 1])
    leaked = {"SLURM_CPU_BIND": "verbose,map_cpu:0", "SLURM_MEM_BIND": "local", "SLURM_STEP_ID": "3",
              "SLURM_DISTRIBUTION": "cyclic", "SBATCH_DEBUG": "1", "PMIX_RANK": "7", "PMIX_NAMESPACE": "old"}
    res = subprocess.run(["bash", "-c", scrub + '\nenv -0'], env={"PATH": os.environ["PATH"], **BATCH_STEP_ENV,
                                                                 **leaked}, capture_output=True, text=True)
    left = dict(kv.split("=", 1) for kv in res.stdout.split("\0") if kv)
    assert {k: v for k, v in left.items() if k.startswith(("SLURM", "SBATCH", "PMIX"))} == BATCH_STEP_ENV, res.stderr


def test_where_sbatch_runs():
    assert dry_of().request.where == {"kind": "local"}
    ssh = dry_of(SPEC.replace("workdir: /fsx/jobs", "workdir: /fsx/jobs\n    login: alice@login-1:2222"))
    assert ssh.request.where["kind"] == "ssh"
    assert (ssh.request.where["user"], ssh.request.where["host"], ssh.request.where["port"]) == (
        "alice", "login-1", 2222)
    sim = dry_of(SPEC.replace("workdir: /fsx/jobs", "workdir: /fsx/jobs\n    sim: c1"))
    assert sim.request.where == {"kind": "sim", "name": "c1", "root": "/var/tmp/mpirun-kit-sim/c1"}


def test_a_bad_signal_spec_is_refused_with_its_field():
    from mpirun_kit.spec.findings import JobSpecError

    with pytest.raises(JobSpecError, match="signal"):
        load_job_text(SPEC.replace("USR1@90", "usr1 90"))


FACTS = SD.ClusterFacts("22.05.8", "pmix", (SA.Partition("debug", ("algo-1", "algo-2", "algo-3"), default=True),
                                           SA.Partition("gpu", ("algo-3",))), True)


def test_checks_name_the_field_in_one_line():
    req = dataclasses.replace(dry_of().request, partition="nosuch", nodes=2, tasks_per_node=1, account=None)
    with pytest.raises(SpecError) as e:
        SD.check_request(req, FACTS)
    assert str(e.value) == ("target.slurm.partition: the cluster has no partition 'nosuch'; its partitions are "
                            "debug, gpu")
    with pytest.raises(SpecError) as e:
        SD.check_request(dataclasses.replace(req, partition="gpu"), FACTS)
    assert str(e.value) == ("resources.hosts: the job needs 2 nodes, but partition 'gpu' has 1 (algo-3); lower "
                            "resources.hosts or choose a larger partition")
    SD.check_request(dataclasses.replace(req, partition=None), FACTS)   # the default partition
    no_default = SD.ClusterFacts("22.05.8", "pmix", (SA.Partition("gpu", ("a",)),), False)
    with pytest.raises(SpecError, match="target.slurm.partition is not set and the cluster has no default"):
        SD.check_request(dataclasses.replace(req, partition=None), no_default)


def test_sbatch_refusals_become_one_line_naming_the_field():
    req = dataclasses.replace(dry_of().request, partition="debug", nodes=9, tasks_per_node=2, account="nobody")
    e = SD.sbatch_error("sbatch: error: Batch job submission failed: Invalid account or account/partition "
                       "combination specified\n", req)
    assert isinstance(e, SpecError) and "\n" not in str(e) and str(e).startswith("target.slurm.account: Slurm "
                                                                                  "refused account 'nobody'")
    e = SD.sbatch_error("sbatch: error: Batch job submission failed: Requested node configuration is not available",
                       req)
    assert str(e).startswith("the job is larger than the cluster can run: 9 node(s) x 2 task(s)")


#: ``srun --mpi=list`` of Debian's Slurm 22.05.8 (recorded on this machine, stdout); the second is the same cluster
#: with Slurm's PMIx plugin removed (written by hand: every Debian build here has it), the third the older
#: ``srun: ``-prefixed form.
MPI_LIST_22_05 = ("MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\n"
                  "specific pmix plugin versions available: pmix_v4\n")
MPI_LIST_NO_PMIX = "MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n"
MPI_LIST_OLD = "srun: MPI types are...\nsrun: none\nsrun: openmpi\nsrun: pmi2\nsrun: pmix\nsrun: pmix_v3\n"


def test_srun_mpi_list_is_read_in_both_forms():
    assert SA.parse_mpi_list(MPI_LIST_22_05) == ("pmix", "none", "cray_shasta", "pmi2", "pmix_v4")
    assert SA.parse_mpi_list(MPI_LIST_NO_PMIX) == ("none", "cray_shasta", "pmi2")
    assert SA.parse_mpi_list(MPI_LIST_OLD) == ("none", "openmpi", "pmi2", "pmix", "pmix_v3")


def test_a_cluster_without_pmix_is_refused_in_one_line_naming_its_plugins_and_the_remedy():
    req = dataclasses.replace(dry_of().request, partition="debug", nodes=2, tasks_per_node=1, account=None,
                              launch="srun")
    no_pmix = SD.ClusterFacts("22.05.8", "pmi2", FACTS.partitions, True, SA.parse_mpi_list(MPI_LIST_NO_PMIX))
    with pytest.raises(SpecError) as e:
        SD.check_request(req, no_pmix)
    assert str(e.value) == (
        "target.slurm.launch is 'srun' (the ranks start with srun --mpi=pmix), but this cluster's srun offers no "
        "pmix (srun --mpi=list: none, cray_shasta, pmi2; MpiDefault=pmi2); set target.slurm.launch: mpirun (Open "
        "MPI starts the ranks inside the allocation), or ask the cluster's admins for Slurm's PMIx plugin")
    SD.check_request(dataclasses.replace(req, launch="mpirun"), no_pmix)      # mpirun needs no Slurm PMIx
    with_pmix = SD.ClusterFacts("22.05.8", "none", FACTS.partitions, True, SA.parse_mpi_list(MPI_LIST_22_05))
    SD.check_request(req, with_pmix)
    SD.check_request(req, FACTS)                                 # srun could not say: nothing refused on it


class _Recorded(SR.Runner):
    """Slurm's clients answering from recorded text (no cluster: the discovery's parsing is what is tested)."""

    def __init__(self, answers):
        self.answers = answers

    def run(self, argv, *, input=None, timeout=60.0):
        return self.answers.get(" ".join(argv), (1, "", "not recorded"))


def test_discovery_reads_the_clusters_mpi_plugins():
    answers = {"scontrol show config": (0, "SLURM_VERSION = 22.05.8\nMpiDefault = pmix\n", ""),
               "sinfo -h -N -o %P %N": (0, "debug* algo-1\ndebug* algo-2\n", ""),
               "srun --mpi=list": (0, MPI_LIST_NO_PMIX, "")}
    facts = SD.discover(_Recorded(answers))
    assert facts.mpi_plugins == ("none", "cray_shasta", "pmi2") and facts.mpi_default == "pmix"
    assert SD.discover(_Recorded({**answers, "srun --mpi=list": (1, "", "srun: error")})).mpi_plugins is None
    assert dry_of().request.launch == "srun"


def test_the_gpu_option_takes_the_form_of_the_clusters_version():
    assert SS.gpu_option(8) == SS.gpu_option(8, "22.05.8") == SS.gpu_option(8, "19.05.0") == "--gpus-per-node=8"
    assert SS.gpu_option(8, "18.08.9") == SS.gpu_option(8, "17.11.13") == "--gres=gpu:8"
    assert SS.gpu_option(8, "") == SS.gpu_option(8, "unknown") == "--gpus-per-node=8"
    dry = dry_of()
    # The dry run renders the current form and says what it assumed and why.
    assert any(n.startswith("GPUs: --gpus-per-node=8 assumes Slurm 19.05 or later") and "--gres=gpu:8" in n
               for n in dry.notes)
    script = "/fsx/jobs/train-1/batch.sh"
    assert SD.for_cluster(dry, FACTS) == dry                                 # 22.05: as rendered
    old = dict(SD.for_cluster(dry, SD.ClusterFacts("18.08.9", "pmix", FACTS.partitions, True)).files)[script]
    assert "#SBATCH --gres=gpu:8" in old.splitlines() and "--gpus-per-node" not in old
    assert old.replace("--gres=gpu:8", "--gpus-per-node=8") == dict(dry.files)[script]   # nothing else changed


class _Cluster(_Recorded):
    """Recorded answers, plus the files submit writes (runner.write) kept by path."""

    def __init__(self, answers):
        super().__init__(answers)
        self.files = {}

    def run(self, argv, *, input=None, timeout=60.0):
        if argv[1:4] == ["-m", "mpirun_kit.exec.remote_host", "write"]:
            self.files[argv[4]] = input
            return 0, "", ""
        if argv[1:5] == ["-m", "mpirun_kit.exec.remote_host", "scrubbed", "--"] and argv[5] == "sbatch":
            return 0, "77\n", ""
        return super().run(argv, input=input, timeout=timeout)


@pytest.mark.parametrize("version, line", [("22.05.8", "#SBATCH --gpus-per-node=8"), ("18.08.9", "#SBATCH --gres=gpu:8")])
def test_submit_writes_the_gpu_option_of_the_discovered_version(version, line):
    cluster = _Cluster({"scontrol show config": (0, f"SLURM_VERSION = {version}\nMpiDefault = pmix\n", ""),
                        "sinfo -h -N -o %P %N": (0, "gpu* algo-1\ngpu* algo-2\n", ""),
                        "srun --mpi=list": (0, MPI_LIST_22_05, "")})
    assert ST.submit(dry_of(), cluster, "secret") == "77"
    assert line in cluster.files["/fsx/jobs/train-1/batch.sh"].splitlines()


def test_query_asks_squeue_then_sacct_then_sacct_text():
    # While the job is queued or running squeue knows it; after its end only sacct does; a cluster
    # without accounting answers sacct --json with an error and may still have sacct's text.
    squeue = {"squeue --json -j 1": (0, sample("squeue-22.05"), "")}
    assert SA.query(_Recorded(squeue), "1").state == "RUNNING"
    ended = {"squeue --json -j 1": (0, '{"jobs": []}', ""), "sacct --json -j 1": (0, sample("sacct-22.05"), "")}
    assert SA.query(_Recorded(ended), "1").state == "FAILED"
    unreadable = {"squeue --json -j 1": (0, "squeue: error: unrecognized option '--json'", ""),
                  "sacct --json -j 1": (0, sample("sacct-22.05"), "")}
    assert SA.query(_Recorded(unreadable), "1").state == "FAILED"
    forgotten = {"squeue --json -j 1": (1, "", "slurm_load_jobs error: Invalid job id specified"),
                 "sacct --json -j 1": (0, '{"jobs": []}', "")}
    assert SA.query(_Recorded(forgotten), "1") is None
    with pytest.raises(ClusterError, match="^could not ask Slurm about job 1 from this host: squeue: not recorded"):
        SA.query(_Recorded({}), "1")     # nothing answered: never taken for a job Slurm forgot (issue 40 item 5)


def test_the_run_directory_is_refused_where_another_user_could_swap_its_files(tmp_path):
    # The default workdir is under /tmp, which every user of a login node shares: a directory another
    # user made there (or one anybody may write in) would let them replace the batch script or read
    # the job's secret between our write and sbatch.  Real files, real bash (LocalRunner).
    import os
    import pwd

    runner = SR.LocalRunner()
    mine = tmp_path / "mine"
    runner.write(str(mine / "run-1" / "batch.sh"), "#!/bin/bash\n", 0o755)
    assert (mine / "run-1" / "batch.sh").read_text() == "#!/bin/bash\n"
    assert oct((mine / "run-1").stat().st_mode & 0o777) == "0o700"

    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(ClusterError) as e:
        runner.write(str(open_dir / "run-1" / "batch.sh"), "evil?\n")
    assert f"{open_dir} is writable by other users (mode 777)" in str(e.value)
    assert "set target.slurm.workdir to a directory only you can write" in str(e.value)

    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, pwd.getpwnam("nobody").pw_uid, -1)
        with pytest.raises(ClusterError) as e:
            runner.write(str(theirs / "run-1" / "job-secret"), "s", 0o600)
        # the one rule's words (core/private.py, through exec/remote_host.py write --private), as the ssh target's
        assert f"{theirs} belongs to uid {pwd.getpwnam('nobody').pw_uid} (nobody), not to you" in str(e.value)
        assert not (theirs / "run-1" / "job-secret").exists()


def test_the_typed_request_round_trips_through_the_run_directory_as_submit_detach_records_it(tmp_path):
    """Issue #28 item 2: the request is a SlurmRequest (a frozen dataclass, not a dict); ``submit --detach`` writes
    it to the run directory as JSON (service/runs.record_request) and its supervisor reads it back (load_request)."""
    from mpirun_kit.service.runs import load_request, record_request, submitter
    from mpirun_kit.records import RecordStore
    from mpirun_kit.targets.base import SubmitOptions

    compiled = compile_job(load_job_text(SPEC), python="python3")
    target = get_target("slurm")
    store = RecordStore(tmp_path / "state")
    rec = store.create(compiled.job.name, "slurm", spec=None, runs_root=tmp_path / "runs")
    opts = SubmitOptions(job_id=rec.job_id, run_dir=rec.run_dir)
    dry = target.prepare(compiled, opts)
    assert isinstance(dry.request, SS.SlurmRequest)
    rec = record_request(store, rec, target, compiled, dry, opts)
    details = dict(rec.details)
    assert len(details.pop("request_sha256")) == 64   # run-detached runs only the request submit wrote (issue #39)
    assert details == {"where": {"kind": "local"}, "run_dir": dry.request.run_dir, "grace_s": dry.request.grace_s,
                       "nodes": len(compiled.hosts), "user": submitter(), "submitted_from": socket.gethostname()}
    target_back, dry_back, opts_back = load_request(rec)
    assert (target_back, dry_back, opts_back) == (target, dry, opts)
    assert dry_back.render() == dry.render() and dry_back.to_json() == dry.to_json()


class _Polled(SR.Runner):
    """squeue says the job runs twice, then that it completed; the batch step left exit code 0."""

    def __init__(self):
        self.asked = 0

    def run(self, argv, *, input=None, timeout=60.0):
        if argv[:2] == ["squeue", "--json"]:
            self.asked += 1
            state = "RUNNING" if self.asked <= 2 else "COMPLETED"
            return 0, json.dumps({"jobs": [{"job_id": 7, "name": "train", "job_state": state}]}), ""
        if argv[1:4] == ["-m", "mpirun_kit.exec.remote_host", "read-many"]:
            return 0, "".join(("+MAo=" if p.endswith("/exit_code") else "-") + "\n" for p in argv[6:]), ""
        return 1, "", ""


@pytest.mark.parametrize("kind, every", [("sim", ST.SIM_POLL_S), ("ssh", ST.POLL_S), ("local", ST.POLL_S)])
def test_wait_asks_a_sim_cluster_more_often_than_a_real_one(kind, every, tmp_path):
    """A real cluster's slurmctld serves every user: --wait asks it once a second; a sim cluster's runs on this
    machine for the job alone, and is asked four times as often (its tests end sooner)."""
    dry = dry_of()
    dry = dataclasses.replace(dry, request=dataclasses.replace(dry.request, where={"kind": kind}, run_dir=str(tmp_path)))
    clock = FakeClock()
    job = ST.follow(dry, _Polled(), "7", clock=clock, out=io.BytesIO(), err=io.BytesIO())
    assert job.state == "COMPLETED" and clock.sleeps == [every, every]


class _Counted(SR.LocalRunner):
    """This machine's bash and files, every command counted (what a login node over ssh pays a session for)."""

    def __init__(self):
        self.commands = 0

    def run(self, argv, *, input=None, timeout=60.0):
        self.commands += 1
        return super().run(argv, input=input, timeout=timeout)


def test_the_result_files_are_read_in_few_commands_byte_exact(tmp_path):
    runner = _Counted()
    files = {"plain": "0\n", "utf8": "rank 1 on algo-1 — exit 3\n\n  trailing", "empty": ""}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = [str(tmp_path / n) for n in ("plain", "missing", "utf8", "empty")]
    assert runner.read_many(paths) == ["0\n", None, files["utf8"], ""]
    assert runner.commands == 1
    # The batch step's result of a failed attempt 1: its code, master, signal and the master's failure report.
    adir = tmp_path / "run" / "attempt-1"
    (adir / "algo-1" / "output").mkdir(parents=True)
    (tmp_path / "run" / "attempt").write_text("1\n")
    (adir / "exit_code").write_text("3\n")
    (adir / "master").write_text("algo-1\n")
    (adir / "algo-1" / "output" / "failure").write_text("job failed with exit code 3\n")
    runner.commands = 0
    res = ST.read_result(runner, str(tmp_path / "run"))
    assert (res.exit_code, res.attempt, res.signal, res.failure_text) == (3, 1, None, "job failed with exit code 3\n")
    assert runner.commands == 3    # the attempt; code, master and signal; the failure report (was 5)


# -- issue 39 item 4: no value starts a line of the batch script ---------------------------------------------------
def _with_slurm(**fields):
    compiled = compile_job(load_job_text(SPEC), python="python3")
    s = dataclasses.replace(compiled.job.target.slurm, **fields)
    job = dataclasses.replace(compiled.job, target=dataclasses.replace(compiled.job.target, slurm=s))
    return dataclasses.replace(compiled, job=job)


@pytest.mark.parametrize("fields, named", [
    ({"partition": "gpu\ntouch /tmp/owned"}, "target.slurm.partition: 'gpu\\ntouch /tmp/owned' holds '\\n'"),
    ({"account": "research\r#SBATCH --uid=0"}, "target.slurm.account: "),
    ({"time": "1:00:00\x00"}, "target.slurm.time: "),
    ({"sbatch_options": ("--constraint=p5", "--mail-type=END\ntouch /tmp/owned")},
     "target.slurm.sbatch_options[1]: '--mail-type=END\\ntouch /tmp/owned' holds '\\n'"),
    ({"workdir": "/fsx/jobs\nx"}, "target.slurm.workdir: "),
])
def test_a_line_break_in_a_spec_value_is_refused_by_its_field(fields, named):
    """The script builder refuses on its own, whatever the spec's checks let through: a newline in partition or
    sbatch_options would otherwise end the ``#SBATCH`` comment and start a shell line of the job."""
    with pytest.raises(SpecError) as exc:
        SS.sbatch_options(_with_slurm(**fields), "/fsx/jobs/train-1", "train-1")
    assert str(exc.value).startswith(named)
    assert "must not start another; remove the line break or control character" in str(exc.value)


def test_render_script_refuses_a_value_that_would_start_a_line():
    with pytest.raises(SpecError, match=r"^the job's name: 'j\\nrm -rf ~' holds '\\n'"):
        SS.render_script(job="j\nrm -rf ~", run_dir="/r", entrypoint=["python3"], sbatch=[])
    with pytest.raises(SpecError, match=r"^the #SBATCH option 1 \('--partition'\): "):
        SS.render_script(job="j", run_dir="/r", entrypoint=["python3"], sbatch=["--partition=a\nb"])
    with pytest.raises(SpecError, match=r"^the entrypoint's argv\[1\]: "):
        SS.render_script(job="j", run_dir="/r", entrypoint=["python3", "a\u2028b"], sbatch=[])


def test_every_value_stays_inside_its_own_line():
    """Values with quotes, spaces, ``$()`` and ``#`` stay within the line they were put in, quoted once."""
    odd = "x'$(touch /tmp/owned)\"; # y"
    script = SS.render_script(job="j", run_dir="/r", entrypoint=["python3", odd], sbatch=[f"--comment={odd}"])
    lines = [line for line in script.splitlines() if "touch /tmp/owned" in line]
    assert len(lines) == 2 and lines[0].startswith("#SBATCH ") and lines[1].startswith("ep=(")


# -- the job under the one supervisor (SlurmChild), issue 38 item 2 ------------------------------------------------
class _Job(SR.Runner):
    """squeue's answers for job 7 from ``states`` (the last one repeats once they run out; a ``scancel --batch``
    moves to ``after_term``), every command kept.  No cluster: what is tested is which commands the supervisor's
    stop sends, and when."""

    def __init__(self, states, after_term=None):
        self.states, self.after_term, self.commands = list(states), after_term, []

    def run(self, argv, *, input=None, timeout=60.0):
        self.commands.append(argv)
        if argv[:2] == ["scancel", "--batch"] and self.after_term is not None:
            self.states = list(self.after_term)
        if argv[:2] == ["squeue", "--json"]:
            state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            return 0, json.dumps({"jobs": [{"job_id": 7, "name": "train", "job_state": state}]}), ""
        return (0, "", "") if argv[0] == "scancel" else (1, "", "")

    def scancels(self):
        return [a for a in self.commands if a[0] == "scancel"]


def test_cancel_asks_the_batch_shell_first_and_the_job_ends_as_a_stopped_job_does():
    runner = _Job(["RUNNING"], after_term=["RUNNING", "COMPLETING", "CANCELLED"])
    job = ST.cancel_job(runner, "7", grace_s=10.0, clock=FakeClock())
    assert job.state == "CANCELLED"
    assert runner.scancels() == [["scancel", "--batch", "--signal=TERM", "7"]]


def test_cancel_of_a_job_that_ignores_the_batch_shells_term_ends_with_scancel_then_gives_up():
    runner = _Job(["RUNNING"])
    clock = FakeClock()
    with pytest.raises(ClusterError) as e:
        ST.cancel_job(runner, "7", grace_s=10.0, clock=clock, timeout=60.0)
    assert str(e.value) == "Slurm job 7 is still RUNNING 60 s after scancel; check it with scontrol show job 7"
    assert runner.scancels() == [["scancel", "--batch", "--signal=TERM", "7"], ["scancel", "7"]]
    # the plain scancel came grace_s + CANCEL_MARGIN_S after the batch shell's TERM, the give-up timeout later
    assert 10.0 + ST.CANCEL_MARGIN_S + 60.0 <= clock.monotonic() < 10.0 + ST.CANCEL_MARGIN_S + 60.0 + 1.0


def test_cancel_of_a_pending_job_is_one_scancel():
    runner = _Job(["PENDING", "PENDING", "CANCELLED"])
    assert ST.cancel_job(runner, "7", clock=FakeClock()).state == "CANCELLED"
    assert runner.scancels() == [["scancel", "7"]]


def test_following_ends_with_the_job_running_on_a_signal_to_submit():
    """``submit --wait`` interrupted: following ends, nothing is cancelled (the supervisor asks no stop)."""
    runner = _Job(["RUNNING"])
    asked = []

    def stopped():
        asked.append(1)
        return "SIGINT" if len(asked) >= 3 else None

    dry = dry_of()
    dry = dataclasses.replace(dry, request=dataclasses.replace(dry.request, where={"kind": "ssh"}))
    job = ST.follow(dry, runner, "7", clock=FakeClock(), out=io.BytesIO(), err=io.BytesIO(), stopped=stopped)
    assert job.state == "RUNNING" and runner.scancels() == []


def test_a_login_side_python_without_mpirun_kit_is_named_with_the_remedy(tmp_path):
    """The run directory is written and read where Slurm's clients run with exec/remote_host.py's verbs: a Python
    there without mpirun_kit is named, with the field that picks it (recorded answer of such a Python)."""
    python = tmp_path / "python3"
    python.write_text("#!/bin/sh\necho \"$0: No module named mpirun_kit.exec.remote_host\" >&2\nexit 1\n")
    python.chmod(0o755)
    runner = SR.LocalRunner()
    runner.python = str(python)
    with pytest.raises(ClusterError) as e:
        runner.write(str(tmp_path / "run" / "batch.sh"), "#!/bin/bash\n", 0o755)
    assert str(e.value) == (f"could not write {tmp_path}/run/batch.sh on the Slurm side: {python} has no mpirun_kit "
                            f"({python}: No module named mpirun_kit.exec.remote_host); install mpirun_kit for the "
                            "Python target.slurm.python names there (pip install mpirun_kit)")
    with pytest.raises(ClusterError, match=r"install mpirun_kit for the Python target.slurm.python names there"):
        runner.read_many([str(tmp_path / "run" / "exit_code")])


# -- issue 40 item 5: Slurm's loose ends ---------------------------------------------------------------------------
@pytest.mark.parametrize("options, index, named", [
    (("--constraint=p5", "--array=0-3"), 1, "--array=0-3"),
    (("-a", "0-3"), 0, "-a"),
    (("-a0-3",), 0, "-a0-3"),
    (("--arr=1,2",), 0, "--arr=1,2"),
    (("--dependency=afterok:41",), 0, "--dependency=afterok:41"),
    (("--dep", "afterany:41"), 0, "--dep"),
    (("-d afterok:41",), 0, "-d afterok:41"),
])
def test_array_and_dependency_in_sbatch_options_are_refused_by_field_with_the_remedy(options, index, named):
    """An array starts many jobs under one record, a dependency leaves it pending on another job: neither fits
    one record per Slurm job, so both are refused before anything reaches sbatch, by field and with the remedy."""
    with pytest.raises(SpecError) as exc:
        SS.sbatch_options(_with_slurm(sbatch_options=options), "/fsx/jobs/train-1", "train-1")
    text = str(exc.value)
    assert text.startswith(f"target.slurm.sbatch_options[{index}]: {named!r} ")
    if "-a" in named[:3] or "--ar" in named:
        assert "one Slurm job per mpirun_kit job" in text and "submit the spec once per task" in text
    else:
        assert "mpirun_kit submit --wait" in text and "then submit this one" in text


@pytest.mark.parametrize("options", [("--account=research",), ("-A", "research"), ("-D", "/fsx"),
                                     ("--deadline=now+1hour",), ("--acctg-freq=30",)])
def test_options_that_only_look_like_array_or_dependency_pass(options):
    assert SS.sbatch_options(_with_slurm(sbatch_options=options), "/fsx/jobs/train-1", "train-1")[-len(options):] \
        == list(options)


class _Unreachable(SR.Runner):
    """A host whose Slurm clients cannot reach slurmctld or slurmdbd (recorded 22.05 answers of a host without the
    cluster's slurm.conf), but which sees the run directory: ``files`` are its contents."""

    def __init__(self, files=None):
        self.files = files or {}

    def run(self, argv, *, input=None, timeout=60.0):
        if argv[0] == "squeue":
            return 1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
        if argv[0] == "sacct":
            return 1, "", "sacct: error: Problem talking to the database: Connection refused\n"
        raise AssertionError(argv)

    def read_many(self, paths, limit=1 << 20):
        return [self.files.get(p) for p in paths]


class _Forgotten(_Unreachable):
    """Slurm reached, and it no longer knows job 7 (squeue's and sacct's answers for a job past MinJobAge with no
    accounting)."""

    def run(self, argv, *, input=None, timeout=60.0):
        if argv[0] == "squeue":
            return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
        return 1, "", "sacct: error: Slurm accounting storage is disabled\n"


def _slurm_record(**kw):
    from mpirun_kit.records import JobRecord

    return JobRecord(job_id="ab12", name="train", target="slurm", native="7", state=JobState.RUNNING,
                     details={"where": {"kind": "local"}, "run_dir": "/fsx/jobs/train-ab12",
                              "submitted_from": "login-1"}, **kw)


def test_a_host_whose_slurm_clients_cannot_reach_the_cluster_is_an_error_never_a_lost_job():
    """status from a host that sees the records but not Slurm: said with the host to run it on, the job not
    marked lost (and not "Slurm: gone" for one that ended)."""
    with pytest.raises(ClusterError) as e:
        SA.query(_Unreachable(), "7")
    assert str(e.value).startswith("could not ask Slurm about job 7 from this host: squeue: slurm_load_jobs error: "
                                   "Unable to contact slurm controller (connect failure); sacct: ")
    with pytest.raises(ClusterError) as e:
        ST.TARGET._describe(_slurm_record(), _Unreachable())
    assert "could not ask Slurm about job 7 from this host" in str(e.value)
    assert "run it on a host whose Slurm clients reach the cluster (the job was submitted from login-1)" in str(e.value)
    ended = _Unreachable({"/fsx/jobs/train-ab12/attempt": "0\n", "/fsx/jobs/train-ab12/attempt-0/exit_code": "0\n"})
    with pytest.raises(ClusterError):
        ST.TARGET._describe(_slurm_record(), ended)


def test_jobs_lists_a_slurm_job_it_cannot_ask_about_with_its_recorded_state(monkeypatch):
    monkeypatch.setattr(ST, "runner_for", lambda where: _Unreachable())
    (status,) = ST.TARGET.list([_slurm_record()])
    assert status.state == JobState.RUNNING
    assert status.detail.startswith("Slurm not reachable from this host: could not ask Slurm about job 7")


def test_a_job_slurm_forgot_with_no_result_is_lost_and_one_with_a_result_says_so():
    assert SA.query(_Forgotten(), "7") is None
    run = "/fsx/jobs/train-ab12"
    status = ST.TARGET._describe(_slurm_record(), _Forgotten({f"{run}/batch.sh": "#!/bin/bash\n"}))
    assert status.state == JobState.LOST
    status = ST.TARGET._describe(_slurm_record(), _Forgotten({f"{run}/batch.sh": "#!/bin/bash\n",
                                                               f"{run}/attempt": "0\n",
                                                               f"{run}/attempt-0/exit_code": "0\n"}))
    assert (status.state, status.detail) == (JobState.SUCCEEDED, "Slurm: no longer lists it")


def test_a_run_directory_this_host_does_not_see_is_named_for_status_and_logs(monkeypatch):
    """A job Slurm no longer lists, whose run directory (target.slurm.workdir) is not mounted here: the host to
    run status on is named, the job not marked lost; logs says the same instead of printing nothing."""
    with pytest.raises(ClusterError) as e:
        ST.TARGET._describe(_slurm_record(), _Forgotten())
    assert str(e.value) == ("job ab12's run directory /fsx/jobs/train-ab12 is not on this host (its batch.sh is "
                            "missing here); run status on a host that mounts target.slurm.workdir (the job was "
                            "submitted from login-1)")
    monkeypatch.setattr(ST, "runner_for", lambda where: _Forgotten())
    with pytest.raises(ClusterError, match=r"^job ab12's run directory /fsx/jobs/train-ab12 is not on this host .*"
                                           r"run logs on a host"):
        list(ST.TARGET.logs(_slurm_record()))


class _JobWithFiles(_Job):
    """``_Job`` whose run-directory writes are kept in order with its commands."""

    def write(self, path, text, mode=0o644):
        self.commands.append(["write", path])


def test_cancel_marks_the_run_directory_before_the_batch_shells_term_so_the_job_ends_cancelled():
    """The batch shell ends a job mpirun_kit cancelled as Slurm's own cancel does (its scancel once the master
    reported), so sacct says CANCELLED rather than FAILED; the marker tells it from the time limit's TERM."""
    runner = _JobWithFiles(["RUNNING"], after_term=["RUNNING", "CANCELLED"])
    ST.cancel_job(runner, "7", run_dir="/fsx/jobs/train-1", grace_s=10.0, clock=FakeClock())
    marker, term = ["write", "/fsx/jobs/train-1/cancel-requested"], ["scancel", "--batch", "--signal=TERM", "7"]
    assert runner.commands.index(marker) < runner.commands.index(term)
    assert runner.scancels() == [term]
    script = dict(dry_of().files)["/fsx/jobs/train-1/batch.sh"]
    line = next(x for x in script.splitlines() if "cancel-requested" in x and not x.startswith("#"))
    assert line == 'if [ "$caught" = TERM ] && [ -e "$run/cancel-requested" ]; then scancel "$SLURM_JOB_ID"; fi'
    # ... after the master's result is written and the secret removed, just before the script's end
    assert script.index(line) > script.index('rm -f "$run/job-secret"')
    assert script.rstrip().endswith(line + '\nexit "$rc"')


def test_a_job_whose_sbatch_has_not_answered_yet_is_submitting_not_an_error():
    """Seen from another shell while submit waits for sbatch: pending, said so; a record that ended without an id
    (sbatch refused it) is shown as recorded, never submitted."""
    record = dataclasses.replace(_slurm_record(), native=None, run_dir=None)
    status = ST.TARGET._describe(record, _Unreachable())
    assert (status.state, status.detail) == (JobState.PENDING, "Slurm: submitting (sbatch has not answered yet)")
    (listed,) = ST.TARGET.list([record])
    assert listed.detail == "Slurm: submitting (sbatch has not answered yet)"
    refused = dataclasses.replace(record, state=JobState.FAILED, exit_code=65, source="launcher",
                                  reason="target.slurm.account: Slurm refused account 'x'")
    status = ST.TARGET._describe(refused, _Unreachable())
    assert (status.state, status.exit_code, status.reason, status.detail) == (
        JobState.FAILED, 65, "target.slurm.account: Slurm refused account 'x'", "Slurm: never submitted")
