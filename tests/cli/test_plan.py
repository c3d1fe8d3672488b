"""`mpirun_kit plan` says everything once (issue 16, defect 7), and relative paths in a
spec resolve against the spec file's directory, as compose and kubectl resolve them."""
from __future__ import annotations

import json
from pathlib import Path


OUTPUTS = ["mrk-role.RoleArn=arn:aws:iam::123456789012:role/mrk", "mrk-role.RoleS3Uri=s3://my-bucket/mpirun-kit",
           "mrk-role.SubmitRoleArn=arn:aws:iam::123456789012:role/mrk-submit",
           "mrk-role.RoleImageRepository=123456789012.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit",
           "mrk-fsx.FileSystemId=fs-0123456789abcdef0",
           "mrk-fsx.LustreMountName=abcdefgh", "mrk-vpc.PrivateSubnet1Id=subnet-1", "mrk-vpc.SecurityGroupId=sg-1"]
STACK_FLAGS = [a for o in OUTPUTS for a in ("--stack-output", o)]


def test_plan_prints_each_fact_once(cli):
    r = cli("plan", "jobs/maskrcnn.yaml", *STACK_FLAGS)
    assert r.rc == 0, r.err
    out = r.out
    # the rank variables, the host list and the preset's reasons: once each
    assert out.count("MPIRUN_KIT_HOSTS=algo-1:8,algo-2:8,algo-3:8,algo-4:8") == 1
    assert out.count("NCCL_DEBUG=WARN") == 1
    assert out.count("keep NCCL's bootstrap/socket traffic off docker") == 1
    assert out.count("hosts ") == 1
    # 32 ranks computed on the hosts: one row per host, not 32 identical rows
    rows = [ln for ln in out.splitlines() if "NUMA-local (resolved on the host)" in ln]
    assert [ln.split()[:4] for ln in rows] == [["0-7", "algo-1", "0-7", "0-7"], ["8-15", "algo-2", "0-7", "0-7"],
                                              ["16-23", "algo-3", "0-7", "0-7"], ["24-31", "algo-4", "0-7", "0-7"]]
    # what each ${stack:...} resolved to
    assert "  stack      mrk-fsx.FileSystemId = fs-0123456789abcdef0\n" in out
    assert "  stack      mrk-vpc.SecurityGroupId = sg-1\n" in out


def test_plan_json_has_the_stack_values(cli):
    r = cli("plan", "jobs/maskrcnn.yaml", "--json", *STACK_FLAGS)
    assert r.rc == 0, r.err
    d = json.loads(r.out)
    assert d["stack_outputs"] == dict(o.split("=", 1) for o in OUTPUTS)


def test_plan_without_credentials_names_every_unread_stack_and_the_flags(cli, bare_env, monkeypatch):
    """plan runs nothing, so it needs no AWS (issue 22 item 4): what it cannot read stays ${stack:...}."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    r = cli("plan", "jobs/maskrcnn.yaml", "--stack-output", OUTPUTS[0])
    assert r.rc == 0, r.err
    assert "--stack-output mrk-fsx.FileSystemId=VALUE --stack-output mrk-fsx.LustreMountName=VALUE" in r.out
    assert "--stack-output mrk-vpc.PrivateSubnet1Id=VALUE --stack-output mrk-vpc.SecurityGroupId=VALUE" in r.out
    assert "  stack      mrk-role.RoleArn = arn:aws:iam::123456789012:role/mrk\n" in r.out


def test_plan_of_a_missing_stack_in_cloudformation_names_them_all(cli, moto, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto)
    r = cli("plan", "jobs/maskrcnn.yaml")
    assert r.rc == 64, r.err
    assert "stack(s) mrk-role, mrk-fsx, mrk-vpc: stack 'mrk-role' does not exist in region us-west-2" in r.err
    assert "stack 'mrk-vpc' does not exist" in r.err and "--stack-output mrk-role.RoleArn=VALUE" in r.err


def test_relative_paths_resolve_against_the_spec_files_directory(cli, tmp_path, monkeypatch):
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir()
    (spec_dir / "j.yaml").write_text(
        "apiVersion: mpirun_kit/v1\nkind: Job\nname: j\nprogram: {command: [./a, '${data:d}', '${output}'], "
        "working_dir: run}\ndata: {d: {local: ../data/d}}\noutput: {local_path: out}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "data" / "d").mkdir(parents=True)  # a local job's data channel must exist (spec/load.py)
    monkeypatch.chdir(elsewhere)
    r = cli("plan", str(Path("..") / "specs" / "j.yaml"), "--json")
    assert r.rc == 0, r.err
    d = json.loads(r.out)
    assert d["channels"] == {"d": str(tmp_path / "data" / "d")}
    assert d["launch_spec"]["program"][-2:] == [str(tmp_path / "data" / "d"), str(spec_dir / "out")]
    assert d["launch_spec"]["working_dir"] == str(spec_dir / "run")


SLURM_SPEC = """\
apiVersion: mpirun_kit/v1
kind: Job
name: j
program: {command: [python3, train.py]}
resources: {hosts: 2, processes_per_host: 4}
target: {type: slurm, slurm: {partition: gpu, gpus_per_node: 4, workdir: /fsx/jobs, python: python3}}
"""


def test_plan_of_a_slurm_job_shows_the_batch_script_whole(cli, tmp_path):
    """What runs on Slurm is the batch script (issue #30 item 1): plan shows it as submit --dry-run does."""
    (tmp_path / "j.yaml").write_text(SLURM_SPEC)
    r = cli("plan", str(tmp_path / "j.yaml"))
    assert r.rc == 0, r.err
    lines = [ln.strip() for ln in r.out.splitlines()]
    for line in ("#!/bin/bash", "#SBATCH --job-name=j", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4",
                 "#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=4"):
        assert line in lines
    assert any(ln.startswith('"${ep[@]}" --role master') for ln in lines)      # the master runs in the batch step
    assert any(ln.startswith("srun --jobid=") for ln in lines)                  # the workers' step
    assert "with srun --mpi=pmix, not the mpirun argv above" in r.out
    assert r.out.count("--- file /fsx/jobs/j-") == 2                            # batch.sh and launch-spec.json
    assert '"mpi_flavour": "srun"' in r.out


def test_a_govcloud_plan_says_why_its_cost_is_the_tables(cli, monkeypatch):
    """Issue 37 finding 8: a GovCloud job's cost line asked the Price List API in us-east-1, which GovCloud's
    credentials cannot call, and fell back to the table saying only that the API did not answer.  No client is
    made now (one made would fail here: no endpoint listens on 127.0.0.1:9)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    r = cli("plan", "jobs/maskrcnn.yaml", "--region", "us-gov-west-1", *STACK_FLAGS)
    assert r.rc == 0, r.err
    cost = next(ln for ln in r.out.splitlines() if ln.startswith("  cost "))
    assert "not us-gov-west-1's; the Price List API has no endpoint in the aws-us-gov partition (it answers in the " \
           "aws and aws-cn partitions, with their credentials), so the price is the table's)" in cost
    assert "did not answer" not in cost


SSH_SPEC = """\
apiVersion: mpirun_kit/v1
kind: Job
name: j
program: {command: [python3, train.py]}
resources: {processes_per_host: 2}
target: {type: ssh, ssh: {hosts: [node1, node2]}}
env_forward: [MYVAR2]
"""


def test_every_multi_host_target_takes_the_users_variables_and_names_the_rest(cli, tmp_path, monkeypatch):
    """Issue #40 item 4: on ssh, Slurm and SageMaker the submitting shell's WANDB_/MLFLOW_/CUDA_ variables went
    nowhere (plan was given no environment) and nothing said so.  Now they travel in the launch spec's env (the
    spec's own env and the preset win), and plan and submit --dry-run name each variable held back or left behind,
    with how to send it."""
    for name, value in {"WANDB_PROJECT": "wp", "MLFLOW_TRACKING_URI": "http://mlflow:5000", "CUDA_HOME": "/cuda",
                        "MYVAR": "m", "MYVAR2": "m2", "HF_TOKEN": "hf_secret", "NCCL_DEBUG": "TRACE"}.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "ssh.yaml").write_text(SSH_SPEC)
    (tmp_path / "slurm.yaml").write_text(SLURM_SPEC)
    runs = {"ssh": cli("plan", str(tmp_path / "ssh.yaml")), "slurm": cli("plan", str(tmp_path / "slurm.yaml")),
            "sagemaker": cli("plan", "jobs/maskrcnn.yaml", *STACK_FLAGS),
            "ssh --dry-run": cli("submit", "--dry-run", str(tmp_path / "ssh.yaml"))}
    for what, r in runs.items():
        assert r.rc == 0, (what, r.err)
        shown = r.out + r.err
        for pair in ("WANDB_PROJECT=wp", "MLFLOW_TRACKING_URI=http://mlflow:5000", "CUDA_HOME=/cuda"):
            name, value = pair.split("=", 1)
            assert pair in shown or f'["{name}", "{value}"]' in shown, (what, pair, shown)   # plan, launch-spec.json
        assert "hf_secret" not in shown, what
        assert "HF_TOKEN not forwarded to the ranks: secret-looking name" in shown, (what, shown)
        left = next(ln for ln in shown.splitlines() if "not forwarded from this shell" in ln)
        assert " MYVAR " in left + " " and "name it in env_forward (or set it in env) to send one" in left, left
        # the shell's variables are facts about the shell, not problems of the job: never a warning (a plan of a
        # clean spec stays free of warnings, as the AWS walk-through asserts, whatever the shell holds)
        assert "warning" not in left.lower(), (what, left)
        if what != "ssh --dry-run":
            assert "\n  env of this shell the ranks do not get\n    - env: " in r.out, (what, r.out)
            assert left.startswith("    - env: not forwarded from this shell"), (what, left)
    assert "MYVAR2=m2" in runs["ssh"].out and "MYVAR2" not in runs["ssh"].out.split("forwarded from this shell")[1]
    # the preset's NCCL_DEBUG (SageMaker's p4d preset sets WARN) wins over the shell's, as the spec's env does
    assert "NCCL_DEBUG=WARN" in runs["sagemaker"].out and "NCCL_DEBUG=TRACE" not in runs["sagemaker"].out
    assert '["WANDB_PROJECT", "wp"]' in runs["slurm"].out    # in the launch spec the batch script's run reads
