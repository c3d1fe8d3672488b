"""build_launch_plan as a whole value; render/to_json redaction; slot precedence; input errors."""
import json

import pytest

from mpirun_kit.cluster import Cluster, Host
from mpirun_kit.errors import SpecError
from mpirun_kit.spec.launch_spec import LaunchSpec, Timeouts
from mpirun_kit.plan import LaunchPlan, RankSlot, build_launch_plan, render, to_json

CLUSTER = Cluster(hosts=(Host("algo-2"), Host("algo-1")), current_host="algo-2", source="rc.json",
                  network_interface="eth0")
ENVIRON = {"PATH": "/bin", "HF_TOKEN": "hf_secret", "AWS_SECRET_ACCESS_KEY": "aws_secret", "NCCL_DEBUG": "INFO"}
SPEC = LaunchSpec(program=("python", "train.py"), processes_per_host=2, env=(("DB_PASSWORD", "pw"),),
                  env_forward=("HF_TOKEN", "AWS_SECRET_ACCESS_KEY"), result_port=3000,
                  timeouts=Timeouts(ssh_ready_s=10.0, ssh_ready_per_host_s=0.5))
RANK = ("/py", "-m", "mpirun_kit.rank", "--", "python", "train.py")
# Rank 0 is on algo-2 (first in the host list), so that is where a framework's rendezvous goes,
# while algo-1 (elected master) runs mpirun and the result channel.
ENV = (("DB_PASSWORD", "pw"), ("HF_TOKEN", "hf_secret"), ("MPIRUN_KIT_HOSTS", "algo-2:2,algo-1:2"),
       ("MPIRUN_KIT_MASTER_ADDR", "algo-2"), ("MPIRUN_KIT_PINNING", "auto"), ("MPIRUN_KIT_RESULT_ADDR", "algo-1:3000"), ("NCCL_DEBUG", "INFO"),
       ("PATH", "/bin"))


def test_whole_plan():
    plan = build_launch_plan(SPEC, CLUSTER, ENVIRON, gpu_count=0, run_as_root=True, cpu_count=8, python="/py")
    assert plan == LaunchPlan(
        hosts=(Host("algo-2", 2), Host("algo-1", 2)),
        master="algo-1",
        ranks=(RankSlot(0, "algo-2", 0, 2), RankSlot(1, "algo-2", 1, 2), RankSlot(2, "algo-1", 0, 2),
               RankSlot(3, "algo-1", 1, 2)),
        program=("python", "train.py"),
        env=ENV,
        env_dropped=(("AWS_SECRET_ACCESS_KEY", "AWS credential: never forwarded; ranks use the instance role"),),
        mpi_flavour="openmpi4", daemons=("orted",),
        argv=("mpirun", "--allow-run-as-root", "-np", "4", "-H", "algo-2:2,algo-1:2", "--bind-to", "none",
              "--map-by", "slot", "--tag-output", "--mca", "orte_abort_on_non_zero_status", "1",
              "--mca", "plm_rsh_no_tree_spawn", "1", "--mca", "btl_vader_single_copy_mechanism", "none",
              "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
              *[x for n, _ in ENV for x in ("-x", n)], "-x", "MPIRUN_KIT_RUN_NONCE", *RANK),
        conflicts=(), network_interface="eth0", result_port=3000, ssh_port=22,
        timeouts=SPEC.timeouts, working_dir=None, source="rc.json")
    assert plan.workers == ("algo-2",)
    assert plan.ssh_deadline_s() == 11.0
    # The same inputs give the same plan: every host computes it independently.
    assert build_launch_plan(SPEC, CLUSTER, dict(ENVIRON), 0, run_as_root=True, cpu_count=8, python="/py") == plan


def test_slots_precedence():
    hf = Cluster(hosts=(Host("a", 3), Host("b")), current_host="a", source="hf")
    spec = LaunchSpec(program=("p",))
    assert [h.slots for h in build_launch_plan(spec, hf, {}, gpu_count=8).hosts] == [3, 8]
    assert [h.slots for h in build_launch_plan(spec, hf, {}, gpu_count=0).hosts] == [3, 1]
    spec2 = LaunchSpec(program=("p",), processes_per_host=2)
    assert [h.slots for h in build_launch_plan(spec2, hf, {}, gpu_count=8).hosts] == [2, 2]


def test_oversubscription_and_flavour_choice():
    one = Cluster(hosts=(Host("h"),), current_host="h", source="x")
    plan = build_launch_plan(LaunchSpec(program=("p",), processes_per_host=4), one, {}, 0, cpu_count=2)
    assert "--oversubscribe" in plan.argv and "mpi_yield_when_idle" in plan.argv
    plan5 = build_launch_plan(LaunchSpec(program=("p",)), one, {}, 0, detected_flavour="openmpi5")
    assert (plan5.mpi_flavour, plan5.daemons) == ("openmpi5", ("prted",))
    mpich = build_launch_plan(LaunchSpec(program=("p",), mpi_flavour="mpich"), one, {}, 0, detected_flavour="openmpi5")
    assert (mpich.mpi_flavour, mpich.daemons, mpich.argv[0]) == ("mpich", ("hydra_pmi_proxy",), "mpiexec")


def test_the_master_waits_for_worker_sshd_only_when_mpirun_starts_its_daemons_over_ssh():
    # mpirun inside a Slurm allocation (daemons_via "slurm") starts its daemons with srun, as srun's own
    # direct launch does: no worker's sshd is needed, so the master must not wait for one (entrypoint/master.py)
    plan = build_launch_plan(SPEC, CLUSTER, ENVIRON, 0, python="/py")
    assert (plan.worker_sshd, SPEC.daemons_via) == (True, "ssh")
    in_slurm = build_launch_plan(LaunchSpec(**{**SPEC.__dict__, "daemons_via": "slurm"}), CLUSTER, ENVIRON, 0)
    assert in_slurm.worker_sshd is False and in_slurm.argv[0] == "mpirun"
    assert "  mpi        openmpi4 (workers wait for orted); srun starts them: no sshd wait" in render(in_slurm)
    assert "no sshd wait" not in render(plan)
    srun = build_launch_plan(LaunchSpec(**{**SPEC.__dict__, "mpi_flavour": "srun"}), CLUSTER,
                             {**ENVIRON, "SLURM_JOB_ID": "7"}, 0)
    assert srun.worker_sshd is False and "no sshd wait" not in render(srun)
    with pytest.raises(SpecError, match="daemons_via"):
        LaunchSpec.from_dict({"program": ["p"], "daemons_via": "rsh"})


def test_render_redacts_and_shows_everything():
    plan = build_launch_plan(SPEC, CLUSTER, ENVIRON, 0, run_as_root=True, cpu_count=8, python="/py")
    text = render(plan)
    assert "hf_secret" not in text and "pw" not in text.replace("pwd", "") and "aws_secret" not in text
    assert "    HF_TOKEN=***\n" in text and "    DB_PASSWORD=***\n" in text and "    NCCL_DEBUG=INFO\n" in text
    assert "    dropped AWS_SECRET_ACCESS_KEY: AWS credential: never forwarded" in text
    assert "  master     algo-1 (result channel port 3000, ssh port 22)\n" in text
    assert "    algo-2               slots=2  ranks 0-1\n" in text
    assert "    algo-1               slots=2  ranks 2-3\n" in text
    assert "    MPIRUN_KIT_RUN_NONCE=*** (result channel run nonce, made by the master for each run)\n" in text
    assert text.rstrip().endswith("-x PATH -x MPIRUN_KIT_RUN_NONCE /py -m mpirun_kit.rank -- python train.py")


def test_json_redacted_and_complete():
    plan = build_launch_plan(SPEC, CLUSTER, ENVIRON, 0, python="/py")
    d = json.loads(to_json(plan))
    assert d["env"]["HF_TOKEN"] == "***" and d["env"]["NCCL_DEBUG"] == "INFO"
    assert d["hosts"] == [{"name": "algo-2", "slots": 2}, {"name": "algo-1", "slots": 2}]
    assert d["ranks"][3] == [3, "algo-1", 1]
    assert d["argv"] == list(plan.argv)
    assert "hf_secret" not in to_json(plan)


def test_secret_in_user_option_redacted_in_render():
    spec = LaunchSpec(program=("p",), mpi_options=("-x", "WANDB_API_KEY=abc"))
    plan = build_launch_plan(spec, Cluster((Host("h"),), "h", "x"), {}, 0)
    assert "WANDB_API_KEY=abc" in plan.argv
    assert "abc" not in render(plan) and "WANDB_API_KEY=***" in render(plan)


@pytest.mark.parametrize("spec, message", [
    (LaunchSpec(program=("p",), processes_per_host=0),
     "processes_per_host is 0; expected a positive integer or null (null = one per GPU)"),
    (LaunchSpec(program=("p",), result_port=70000),
     "result_port 70000 / ssh_port 22: expected TCP ports 1-65535"),
    (LaunchSpec(program=("p",), pinning="numa"),
     "pinning is 'numa'; expected 'auto' (one GPU and its NUMA-local CPUs per rank) or 'none'"),
    (LaunchSpec(program=("p",), mpi_flavour="lam"),
     "mpi_flavour 'lam' is unknown; expected one of ['mpich', 'openmpi4', 'openmpi5', 'srun'] or 'auto'"),
])
def test_plan_errors(spec, message):
    with pytest.raises(SpecError) as e:
        build_launch_plan(spec, Cluster((Host("h"),), "h", "x"), {}, 0)
    assert str(e.value) == message


def test_master_override():
    cluster = Cluster(hosts=(Host("node-b"), Host("node-a")), current_host="node-b", source="hf")
    spec = LaunchSpec(program=("p",))
    assert build_launch_plan(spec, cluster, {}, 0).master == "node-a"
    plan = build_launch_plan(spec, cluster, {}, 0, master="node-b")
    assert (plan.master, plan.workers, dict(plan.env)["MPIRUN_KIT_RESULT_ADDR"]) == ("node-b", ("node-a",), "node-b:0")
    with pytest.raises(SpecError) as e:
        build_launch_plan(spec, cluster, {}, 0, master="login")
    assert str(e.value) == "master 'login' is not among the hosts ['node-b', 'node-a']; the master must be one of the job's hosts"
