"""validate / plan / submit --dry-run through the real CLI entry (main), and ${stack:...} through moto."""
from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from mpirun_kit.cli.main import main

REPO = Path(__file__).resolve().parents[2]
STACK_OUTPUTS = ["--stack-output", "mrk-role.RoleArn=arn:aws:iam::123456789012:role/mrk",
                 "--stack-output", "mrk-fsx.FileSystemId=fs-0123456789abcdef0",
                 "--stack-output", "mrk-fsx.LustreMountName=abcdefgh",
                 "--stack-output", "mrk-vpc.PrivateSubnet1Id=subnet-1",
                 "--stack-output", "mrk-vpc.SecurityGroupId=sg-1"]


def test_validate_every_job_in_the_repo(capsys):
    assert main(["validate", str(REPO / "jobs")]) == 0
    out = capsys.readouterr().out
    for name in ("allreduce-bench.yaml", "maskrcnn-demo.yaml", "maskrcnn.yaml"):
        assert f"jobs/{name}: ok" in out


def test_validate_reports_bad_files_and_exit_64(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: b\nprogram: {modul: x}\n")
    assert main(["validate", str(tmp_path), "--json"]) == 64
    [row] = json.loads(capsys.readouterr().out)
    assert row == {"file": str(tmp_path / "bad.yaml"), "ok": False, "job": None, "target": None, "hosts": None,
                   "problems": [{"line": 4, "key": "program.modul", "message": "unknown key; did you mean 'module'? "
                                 "valid keys here: args, command, module, working_dir"}], "warnings": []}
    assert main(["validate", str(tmp_path / "nope")]) == 64
    assert capsys.readouterr().out == (f"{tmp_path / 'nope'}: cannot read the job spec: no such file or directory; "
                                       "expected a UTF-8 YAML job spec file\n1 of 1 spec(s) invalid\n")


def test_validate_json_has_the_jobs_name_target_and_host_count(capsys):
    """Issue 22 defect 7: the JSON carried only a copy of the text line as `message`."""
    assert main(["validate", str(REPO / "jobs" / "allreduce-bench.yaml"), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert {k: row[k] for k in ("ok", "job", "target", "hosts", "problems")} == {
        "ok": True, "job": "allreduce-bench", "target": "sim", "hosts": 3, "problems": []}
    assert "message" not in row


@pytest.mark.parametrize("command", ["validate", "submit", "plan"])
@pytest.mark.parametrize("name, why", [
    ("nofile.yaml", "no such file or directory (relative to the current directory {cwd})"),
    (".", "a directory (`validate` takes directories; `plan` and `submit` take one spec file)"),
])
def test_missing_or_unreadable_spec_has_one_wording(command, name, why, tmp_path, monkeypatch, capsys):
    """Issue 22 defect 6: `validate nofile.yaml` said "no such file or directory", `submit nofile.yaml`
    "([Errno 2] ...); expected a UTF-8 YAML file" and `submit .` "([Errno 21] Is a directory: '.')"."""
    monkeypatch.chdir(tmp_path)
    if command == "validate" and name == ".":
        name = "sub/x.yaml"  # validate takes "." as a directory of specs; a missing one below it is the case
        why = why.replace("a directory (`validate` takes directories; `plan` and `submit` take one spec file)",
                          "no such file or directory (relative to the current directory {cwd})")
    code = main([command, name])
    out, err = capsys.readouterr()
    line = f"{name}: cannot read the job spec: {why.format(cwd=tmp_path)}; expected a UTF-8 YAML job spec file"
    assert code == 64
    assert line in (out if command == "validate" else err)
    assert "Errno" not in out + err


def test_examples_from_another_directory_say_where_the_path_was_looked_for(tmp_path, monkeypatch, capsys):
    """Issue 22: `cd /tmp; mpirun_kit validate jobs/` exited 64 with no hint that jobs/ is the repository's."""
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "jobs/"]) == 64
    assert f"jobs: cannot read the job spec: no such file or directory (relative to the current directory " \
           f"{tmp_path})" in capsys.readouterr().out


def test_plan_json_of_the_demo(capsys):
    assert main(["plan", str(REPO / "jobs" / "maskrcnn-demo.yaml"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["job"], d["target"], len(d["ranks"])) == ("maskrcnn-demo", "local", 2)
    assert d["launch_plan"]["argv"][0] == "mpirun"
    assert d["tuning"]["preset"] == "cpu"


def test_plan_text_redacts_secrets(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: s\nprogram: {command: [./a]}\n"
                    "env: {WANDB_API_KEY: hunter2, NCCL_PROTO: simple}\n")
    assert main(["plan", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out and "WANDB_API_KEY=***    [spec env]" in out
    assert "! NCCL_PROTO=simple is stale (warning)" in out


def test_plan_hides_secrets_in_the_program_too(tmp_path, capsys):
    """`plan` and `plan --json`: `program`, `argv` and the launch spec, one-token and two-token flags."""
    spec = tmp_path / "s.yaml"
    spec.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: s\n"
                    "program: {command: [./a, --api-key=s3cr3t-api, --password, hunter2-pw, --lr, '0.1']}\n")
    for args in ([], ["--json"]):
        assert main(["plan", str(spec), *args]) == 0
        out = capsys.readouterr().out
        assert "s3cr3t-api" not in out and "hunter2-pw" not in out, out
        assert "--password" in out and "--lr" in out
    assert json.loads(out)["launch_plan"]["program"] == ["./a", "--api-key=***", "--password", "***", "--lr", "0.1"]


def test_submit_dry_run_sagemaker_request(capsys):
    assert main(["submit", str(REPO / "jobs" / "maskrcnn.yaml"), "--dry-run", "--json", "--job-name", "mrk-1",
                 *STACK_OUTPUTS]) == 0
    d = json.loads(capsys.readouterr().out)
    req = d["request"]["CreateTrainingJob"]
    assert req["TrainingJobName"] == "mrk-1"
    assert req["InputDataConfig"][0]["DataSource"]["FileSystemDataSource"]["DirectoryPath"] == "/abcdefgh/coco"
    assert req["VpcConfig"] == {"Subnets": ["subnet-1"], "SecurityGroupIds": ["sg-1"]}


def test_bad_stack_output_flag(capsys):
    assert main(["plan", str(REPO / "jobs" / "maskrcnn.yaml"), "--stack-output", "mrk-fsx=fs-1"]) == 64
    assert "--stack-output 'mrk-fsx=fs-1': expected STACK.OutputKey=VALUE" in capsys.readouterr().err


def test_stack_references_resolved_from_cloudformation_in_moto(moto, monkeypatch, capsys):
    """The stacks are created in the moto server; the CLI's resolver reaches it through AWS_ENDPOINT_URL."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto)
    cf = boto3.client("cloudformation", region_name="us-west-2")
    outputs = {"mrk-role": {"RoleArn": "arn:aws:iam::123456789012:role/from-moto"},
               "mrk-fsx": {"FileSystemId": "fs-0aaaaaaaaaaaaaaaa", "LustreMountName": "mntmoto"},
               "mrk-vpc": {"PrivateSubnet1Id": "subnet-moto", "SecurityGroupId": "sg-moto"}}

    def template(outs):
        return json.dumps({"Resources": {"H": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
                           "Outputs": {k: {"Value": v} for k, v in outs.items()}})

    for stack, outs in outputs.items():
        cf.create_stack(StackName=stack, TemplateBody=template(outs))
    # A role stack from before the spec named its bucket and image outputs: the missing output is named,
    # with the outputs the stack has (a plain list, not a Python repr).
    assert main(["submit", str(REPO / "jobs" / "maskrcnn.yaml"), "--dry-run", "--json", "--job-name", "m"]) == 64
    err = capsys.readouterr().err
    assert "stack 'mrk-role' has no output 'RoleS3Uri'; its outputs are RoleArn" in err, err
    cf.delete_stack(StackName="mrk-role")
    cf.create_stack(StackName="mrk-role", TemplateBody=template({
        **outputs["mrk-role"], "RoleS3Uri": "s3://bucket-moto/mrk",
        "SubmitRoleArn": "arn:aws:iam::123456789012:role/submit-from-moto",
        "RoleImageRepository": "111122223333.dkr.ecr.us-west-2.amazonaws.com/mrk"}))
    assert main(["submit", str(REPO / "jobs" / "maskrcnn.yaml"), "--dry-run", "--json", "--job-name", "m"]) == 0
    req = json.loads(capsys.readouterr().out)["request"]["CreateTrainingJob"]
    assert req["RoleArn"] == "arn:aws:iam::123456789012:role/from-moto"
    assert req["InputDataConfig"][0]["DataSource"]["FileSystemDataSource"]["DirectoryPath"] == "/mntmoto/coco"
    assert req["VpcConfig"] == {"Subnets": ["subnet-moto"], "SecurityGroupIds": ["sg-moto"]}
    # A stack that does not exist: the stack module's error, exit 64 or 69, never a traceback.
    cf.delete_stack(StackName="mrk-vpc")
    code = main(["plan", str(REPO / "jobs" / "maskrcnn.yaml")])
    assert code in (64, 69)
    assert "mrk-vpc" in capsys.readouterr().err


def test_readme_example_spec_is_valid(tmp_path):
    """The complete example in the docs' job-spec page must stay a valid spec."""
    page = (REPO / "docs" / "guide" / "jobs-and-targets.md").read_text()
    section = page.split("# Job specs and targets", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "example.yaml").write_text(block)
    from mpirun_kit.cli.validate import validate_file

    result = validate_file(tmp_path / "example.yaml")
    assert result["ok"], result["text"]


def test_validate_empty_directory(tmp_path, capsys):
    assert main(["validate", str(tmp_path)]) == 64
    assert f"{tmp_path}: no *.yaml or *.yml job specs in this directory" in capsys.readouterr().err
