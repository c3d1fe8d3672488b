"""Golden plans: the jobs/ specs compiled and planned, argv and env compared whole as values.

These go through the launcher's real build_launch_plan (no mocks): a change in the
mpirun line shows up here as a diff to review.
"""
from __future__ import annotations

import json
from pathlib import Path

from mpirun_kit.spec.launch_spec import LaunchSpec, Timeouts
from mpirun_kit.cluster.topology import Topology
from mpirun_kit.spec.compile import compile_job
from mpirun_kit.plan.jobplan import EnvRow, RankRow, make_job_plan
from mpirun_kit.spec.load import load_job, load_job_text

REPO = Path(__file__).resolve().parents[2]
TOPO = REPO / "tests" / "plan" / "topologies"
OUTPUTS = {"mrk-role": {"RoleArn": "arn:aws:iam::123456789012:role/mrk", "RoleS3Uri": "s3://mrk-123456789012-us-west-2",
                        "RoleImageRepository": "123456789012.dkr.ecr.us-west-2.amazonaws.com/mrk",
                        "SubmitRoleArn": "arn:aws:iam::123456789012:role/mrk-submit"},
           "mrk-fsx": {"FileSystemId": "fs-0123456789abcdef0", "LustreMountName": "abcdefgh"},
           "mrk-vpc": {"PrivateSubnet1Id": "subnet-1", "SecurityGroupId": "sg-1"}}
COMMON = ["--bind-to", "none", "--map-by", "slot", "--tag-output", "--mca", "orte_abort_on_non_zero_status", "1",
          "--mca", "plm_rsh_no_tree_spawn", "1", "--mca", "btl_vader_single_copy_mechanism", "none"]


def topo(name: str) -> Topology:
    return Topology.from_dict(json.loads((TOPO / f"{name}.json").read_text()))


def test_demo_plan_on_this_kind_of_machine():
    c = compile_job(load_job(REPO / "jobs" / "maskrcnn-demo.yaml"), python="/venv/bin/python")
    program = ("/venv/bin/python", "-m", "mpirun_kit.maskrcnn.train", "--config", "demo", "--data-dir",
               "../data/shapes", "--output-dir", "../runs/maskrcnn-demo", "--synthetic-if-missing", "--resume", "auto")
    assert c.launch == LaunchSpec(program=program, processes_per_host=2,
                                  env=(("OMP_NUM_THREADS", "1"),), env_inherit=True,   # target local
                                  timeouts=Timeouts(job_s=10800))
    environ = {"PATH": "/usr/bin", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "s", "NCCL_DEBUG": "x", "HF_TOKEN": "t"}
    p = make_job_plan(c, environ, topology=topo("no-gpu"), run_as_root=True, cpu_count=2, python="/venv/bin/python")
    assert list(p.launch.argv) == ["mpirun", "--allow-run-as-root", "-np", "2", "-H", "localhost:2", *COMMON,
                                   "-x", "HOME", "-x", "MPIRUN_KIT_HOSTS", "-x", "MPIRUN_KIT_MASTER_ADDR",
                                   "-x", "MPIRUN_KIT_PINNING", "-x", "MPIRUN_KIT_RESULT_ADDR", "-x", "NCCL_DEBUG",
                                   "-x", "OMP_NUM_THREADS", "-x", "PATH", "-x", "MPIRUN_KIT_RUN_NONCE",
                                   "/venv/bin/python", "-m", "mpirun_kit.rank", "--", *program]
    assert p.env == (     # the submitting shell's environment, as torchrun's ranks get it (issue #40)
        EnvRow("HOME", "/root", "inherited (target local)"),
        EnvRow("MPIRUN_KIT_HOSTS", "localhost:2", "launcher"),
        EnvRow("MPIRUN_KIT_MASTER_ADDR", "localhost", "launcher"),
        EnvRow("MPIRUN_KIT_PINNING", "auto", "launcher"),
        EnvRow("MPIRUN_KIT_RESULT_ADDR", "localhost:0", "launcher"),   # the port: bound when the job starts
        EnvRow("NCCL_DEBUG", "x", "inherited (target local)"),
        EnvRow("OMP_NUM_THREADS", "1", "spec env"),
        EnvRow("PATH", "/usr/bin", "inherited (target local)"),
    )
    # ... less the secrets, each named with how to send it
    assert [n for n, _ in p.launch.env_dropped] == ["AWS_SECRET_ACCESS_KEY", "HF_TOKEN"]
    assert "name it in env_forward" in dict(p.launch.env_dropped)["HF_TOKEN"]
    assert p.ranks == (RankRow(0, "localhost", 0, "-", "all (no GPU)"), RankRow(1, "localhost", 1, "-", "all (no GPU)"))
    assert p.warnings == ()


def test_coco_plan_on_four_p4d():
    c = compile_job(load_job(REPO / "jobs" / "maskrcnn-p4d.yaml"), python="python", resolver=OUTPUTS.__getitem__)
    p = make_job_plan(c, {}, run_as_root=True, python="python")
    hosts = "algo-1:8,algo-2:8,algo-3:8,algo-4:8"
    assert list(p.launch.argv) == [
        "mpirun", "--allow-run-as-root", "-np", "32", "-H", hosts, *COMMON,
        "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
        "-x", "FI_EFA_USE_HUGE_PAGE", "-x", "MPIRUN_KIT_HOSTS", "-x", "MPIRUN_KIT_MASTER_ADDR", "-x",
        "MPIRUN_KIT_PINNING", "-x",
        "MPIRUN_KIT_RESULT_ADDR", "-x", "NCCL_DEBUG", "-x", "NCCL_SOCKET_IFNAME", "-x", "MPIRUN_KIT_RUN_NONCE",
        "python", "-m", "mpirun_kit.rank", "--", "python", "-m", "mpirun_kit.maskrcnn.train", "--config", "r50_fpn_1x",
        "--data-dir", "/opt/ml/input/data/coco", "--output-dir", "/opt/ml/checkpoints", "--resume", "auto"]
    assert p.launch.env == (("FI_EFA_USE_HUGE_PAGE", "0"), ("MPIRUN_KIT_HOSTS", hosts),
                            ("MPIRUN_KIT_MASTER_ADDR", "algo-1"), ("MPIRUN_KIT_PINNING", "auto"),
                            ("MPIRUN_KIT_RESULT_ADDR", "algo-1:0"), ("NCCL_DEBUG", "WARN"),
                            ("NCCL_SOCKET_IFNAME", "^docker,lo,veth"))
    assert [e.origin.split(":")[0] for e in p.env] == ["preset p4d", "launcher", "launcher", "launcher", "launcher",
                                                       "spec env",
                                                       "preset p4d"]
    assert [(r.rank, r.host, r.local_rank, r.gpu) for r in p.ranks[6:10]] == [
        (6, "algo-1", 6, "6"), (7, "algo-1", 7, "7"), (8, "algo-2", 0, "0"), (9, "algo-2", 1, "1")]


def test_sim_plan_rank_map_on_a_recorded_p4d_topology_with_override_and_stale_warning():
    text = ("apiVersion: mpirun_kit/v1\nkind: Job\nname: t\ntarget: {type: sim}\n"
            "resources: {instance_type: ml.p4d.24xlarge, hosts: 2, processes_per_host: 4}\n"
            "program: {command: [./a.out]}\nenv: {NCCL_SOCKET_IFNAME: eth0, NCCL_PROTO: simple}\n")
    c = compile_job(load_job_text(text, "t.yaml"), local_gpus=8)
    p = make_job_plan(c, {}, topology=topo("p4d.24xlarge"), python="python3")
    assert [(r.rank, r.host, r.gpu, r.cpus) for r in p.ranks] == [
        (0, "algo-1", "0", "0-5,48-53"), (1, "algo-1", "1", "6-11,54-59"), (2, "algo-1", "2", "12-17,60-65"),
        (3, "algo-1", "3", "18-23,66-71"), (4, "algo-2", "0", "0-5,48-53"), (5, "algo-2", "1", "6-11,54-59"),
        (6, "algo-2", "2", "12-17,60-65"), (7, "algo-2", "3", "18-23,66-71")]
    assert p.warnings[0] == ("NCCL_SOCKET_IFNAME: your value 'eth0' wins over the preset's '^docker,lo,veth' (keep "
                             "NCCL's bootstrap/socket traffic off docker, loopback and veth interfaces (EFA cheatsheet))")
    assert p.warnings[1].startswith("NCCL_PROTO=simple is stale (warning): NCCL_PROTO=simple was only needed with "
                                    "aws-ofi-nccl <= 1.5.0")
    assert dict(c.launch.env)["NCCL_SOCKET_IFNAME"] == "eth0"


def test_compile_checks_ranks_against_this_machines_gpus_and_warns_on_unknown_families():
    import pytest

    from mpirun_kit.errors import SpecError

    text = "apiVersion: mpirun_kit/v1\nkind: Job\nname: t\nprogram: {command: [a]}\nresources: {processes_per_host: 2}\n"
    with pytest.raises(SpecError, match=r"t.yaml: resources.processes_per_host is 2 but the hosts have 1 GPU\(s\); "
                                        r"expected at most one rank per GPU, or set pinning: none"):
        compile_job(load_job_text(text, "t.yaml"), local_gpus=1)
    ssh = ("apiVersion: mpirun_kit/v1\nkind: Job\nname: t\nprogram: {command: [a]}\n"
           "target: {type: ssh, ssh: {hosts: [a]}}\nresources: {instance_type: x9.large}\n")
    assert compile_job(load_job_text(ssh, "t.yaml")).warnings == (
        "instance type x9.large is not in the GPU table; processes_per_host defaults to 1",
        "tuning: no NCCL/EFA preset for x9.large; set tuning.profile to one of ['p3dn', 'p4d', 'p5', 'g5', 'p3', "
        "'cpu'] or 'none'")
