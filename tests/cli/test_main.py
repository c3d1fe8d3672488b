"""Every command over a matrix of bad environments and arguments (issue 16, defect 2).

A new user has no AWS region, no credentials, files that are missing, binary or
unreadable, paths in /proc, names starting with '-', empty strings.  Each case must end
in one line ``mpirun_kit: error: ...`` naming what to set or fix, with an exit code the
command's own --help documents -- never a traceback, never "internal error".

The cases run in this process through ``main()`` with the environment emptied of AWS_*
and HOME pointed at an empty directory (bare_env); boto3's cached session is dropped per
case, so each reads the environment as a fresh process does.  A few cases also run as
real processes with a clean environment (test_bad_environment_in_a_fresh_process).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .cli_helpers import REPO, all_parsers

BIN = "BIN"          # replaced by a binary file (a copy of the interpreter's first 4 KiB)
MISSING = "MISSING"  # replaced by a path that does not exist
NO_REGION = "no AWS region configured; pass --region REGION, or set AWS_DEFAULT_REGION"
NO_CREDS = "set AWS_PROFILE"
#: an id the job records do not hold, with no region to ask SageMaker about it in (cli/jobs.py)
UNKNOWN_NO_REGION = ("no such job in the records: 'job-1' is not in ", "and no AWS region is configured to look for a "
                     "SageMaker training job of that name (--region REGION)")
SAGEMAKER_JOB = ("jobs/maskrcnn.yaml", "--region", "us-west-2")  # jobs/ name no region (issue 26)

# (argv, environment: "bare" | "region" (a region, no credentials), exit code, text the error line contains)
CASES = [
    # --- AWS commands with no region, then with a region but no credentials
    (("stack", "list"), "bare", 64, NO_REGION),
    (("stack", "outputs", "mrk-vpc"), "bare", 64, NO_REGION),
    (("stack", "delete", "mrk-vpc", "--yes"), "bare", 64, NO_REGION),
    (("status", "job-1"), "bare", 64, UNKNOWN_NO_REGION),
    (("logs", "job-1"), "bare", 64, UNKNOWN_NO_REGION),
    (("stop", "job-1"), "bare", 64, UNKNOWN_NO_REGION),
    (("stack", "list"), "region", 69, NO_CREDS),
    (("stack", "outputs", "mrk-vpc"), "region", 69, NO_CREDS),
    (("status", "job-1"), "region", 69, NO_CREDS),
    (("logs", "job-1"), "region", 69, NO_CREDS),
    (("logs", "job-1", "--follow"), "region", 69, NO_CREDS),
    (("stop", "job-1"), "region", 69, NO_CREDS),
    # (plan without AWS shows the ${stack:...} it cannot read: tests/cli/test_resolve.py)
    (("submit", *SAGEMAKER_JOB), "bare", 69, "--stack-output mrk-vpc.SecurityGroupId=VALUE"),
    # --- names starting with '-', empty strings
    (("stack", "outputs", "--", "-x"), "bare", 64, "stack name '-x' is not valid"),
    (("stack", "outputs", ""), "bare", 64, "stack name '' is not valid"),
    (("stack", "delete", "--yes", "--", "-x"), "bare", 64, "stack name '-x' is not valid"),
    (("stack", "deploy", "", "--template", "cfn/vpc.yaml", "--dry-run"), "bare", 64, "stack name '' is not valid"),
    (("status", "--", "-x"), "bare", 64, "training job name '-x' is not valid"),
    (("logs", ""), "bare", 64, "training job name '' is not valid"),
    (("stop", "--", "-x"), "bare", 64, "training job name '-x' is not valid"),
    (("validate", ""), "bare", 64, "validate: an empty PATH"),
    (("plan", ""), "bare", 64, "JOB.yaml is an empty string"),
    (("submit", "", "--dry-run"), "bare", 64, "JOB.yaml is an empty string"),
    (("keys", "new", "--out", ""), "bare", 64, "--out '' is a directory or empty"),
    (("keys", "show", "--secret-file", MISSING, "--job", ""), "bare", 64, "keys: no job name; pass --job NAME"),
    (("doctor", "--hosts", ""), "bare", 64, "--hosts '': expected host names separated by commas"),
    (("launch", "--hosts", "", "--dry-run", "--", "true"), "bare", 64, "has no host name"),
    (("sim", "up", "--name", "", "--hosts", "1"), "bare", 64, "sim cluster name '' is invalid"),
    (("sim", "up", "--name"), "bare", 2, "sim up: argument --name: expected one argument"),
    (("stack", "deploy", "x"), "bare", 2, "the following arguments are required: --template"),
    (("nosuchcommand",), "bare", 2, "unknown command 'nosuchcommand'"),
    # --- missing, binary, unreadable files and paths in /proc
    (("plan", MISSING), "bare", 64, "cannot read the job spec: no such file or directory"),
    (("plan", BIN), "bare", 64, "cannot read the job spec: not UTF-8 text"),
    (("plan", "/proc/self/mem"), "bare", 64, "/proc/self/mem: cannot read the job spec"),
    (("submit", BIN, "--dry-run"), "bare", 64, "cannot read the job spec: not UTF-8 text"),
    (("doctor", BIN), "bare", 64, "cannot read the job spec: not UTF-8 text"),
    # (validate reports a missing file among its per-file results, with the same words: tests/cli/test_validate.py)
    (("stack", "deploy", "x", "--template", BIN, "--dry-run"), "bare", 64, "not UTF-8 text"),
    (("stack", "deploy", "x", "--template", MISSING, "--dry-run"), "bare", 64, "no such file"),
    (("stack", "deploy", "x", "--template", "/proc/self/mem", "--dry-run"), "bare", 64, "cannot read it"),
    (("keys", "new", "--out", "/proc/nope/x"), "bare", 64, "cannot write --out /proc/nope/x"),
    (("keys", "new", "--out", "/etc/passwd/x"), "bare", 64, "/etc/passwd is a file, not a directory"),
    (("keys", "show", "--secret-file", BIN, "--job", "j"), "bare", 64, "cannot read secret file"),
    (("keys", "show", "--secret-file", "/proc/self/mem", "--job", "j"), "bare", 64, "cannot read secret file"),
    (("keys", "install", "--secret-file", MISSING, "--hosts", "a", "--job", "j", "--dry-run"), "bare", 64,
     "cannot read secret file"),
    (("entrypoint", "--hostfile", BIN, "--dry-run"), "bare", 64, "cannot read hostfile (not UTF-8 text)"),
    (("entrypoint", "--hostfile", "/proc/self/mem", "--dry-run"), "bare", 64, "cannot read hostfile"),
    (("launch", "--hosts", "localhost:1", "--spec", BIN, "--dry-run"), "bare", 64,
     "cannot read launch spec (not UTF-8 text)"),
    (("launch", "--hosts", "localhost:1", "--spec", MISSING, "--dry-run"), "bare", 64, "cannot read launch spec"),
    (("sim", "exec", "--name", "h6nope", "algo-1", "--", "true"), "bare", 69, "no running sim cluster 'h6nope'"),
]


def documented_codes(argv: tuple[str, ...]) -> set[int]:
    """The exit codes the deepest parser ``argv`` reaches lists in its --help epilog."""
    names = all_parsers()
    prog = "mpirun_kit"
    for word in argv:
        if f"{prog} {word}" in names:
            prog = f"{prog} {word}"
    epilog = names[prog].epilog or ""
    assert "exit codes:" in epilog, f"{prog} --help documents no exit codes"
    return {int(c) for c in re.findall(r"^\s+(\d+)\s", epilog.split("exit codes:")[1], re.M)}


def _argv(case_argv, tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(open(sys.executable, "rb").read(4096))
    return [str(binary) if a == BIN else str(tmp_path / "nope" / "missing.yaml") if a == MISSING else a
            for a in case_argv]


@pytest.mark.parametrize("argv, env, code, text", CASES, ids=[" ".join(c[0]) + f" [{c[1]}]" for c in CASES])
def test_bad_environment_ends_in_one_error_line(argv, env, code, text, bare_env, cli, monkeypatch, tmp_path):
    if env == "region":
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    r = cli(*_argv(argv, tmp_path))
    lines = r.err.strip().splitlines()
    assert r.rc == code, r.err
    assert lines and lines[-1].startswith("mpirun_kit: error: "), r.err
    assert all(t in lines[-1] for t in ((text,) if isinstance(text, str) else text)), r.err
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    assert len([ln for ln in lines if ln.startswith("mpirun_kit: error:")]) == 1, r.err
    if argv[0] != "nosuchcommand":
        assert code in documented_codes(tuple(argv)), f"exit code {code} is not in `{' '.join(argv[:2])} --help`"


def test_submit_without_credentials_blames_credentials_not_the_role(bare_env, cli, monkeypatch):
    """All stack outputs given on the command line: only CreateTrainingJob needs AWS, and it has no credentials."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    outs = ["mrk-role.RoleArn=arn:aws:iam::123456789012:role/mrk", "mrk-role.RoleS3Uri=s3://my-bucket/mpirun-kit",
            "mrk-role.RoleImageRepository=123456789012.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit",
            "mrk-role.SubmitRoleArn=arn:aws:iam::123456789012:role/mrk-submit",
            "mrk-fsx.FileSystemId=fs-0123456789abcdef0",
            "mrk-fsx.LustreMountName=abcdefgh", "mrk-vpc.PrivateSubnet1Id=subnet-1", "mrk-vpc.SecurityGroupId=sg-1"]
    r = cli("submit", "jobs/maskrcnn.yaml", "--job-name", "alice--mrk-1",   # the submit role's names: owner--name
            *[a for o in outs for a in ("--stack-output", o)])
    # the first call is the submit role's AssumeRole (issue 26), then the keys, then CreateTrainingJob; the test
    # shell's variables the job leaves behind are named first (issue #40), tests/cli/test_plan.py checks that line
    err = "".join(ln for ln in r.err.splitlines(True) if not ln.startswith("mpirun_kit: note: env: "))
    assert (r.rc, err) == (69, "mpirun_kit: region us-west-2 (from the AWS configuration)\n"
                                 "mpirun_kit: error: AssumeRole arn:aws:iam::123456789012:role/mrk-submit for job "
                                 "alice--mrk-1: no AWS credentials found; set "
                                 "AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run "
                                 "`aws configure`\n")


def test_an_unexpected_error_is_one_line_and_vv_shows_the_traceback(cli, monkeypatch):
    from mpirun_kit.cli import validate

    def boom(args):
        raise RuntimeError("surprise")
    monkeypatch.setattr(validate, "_validate", boom)
    r = cli("validate", "jobs/")
    assert (r.rc, r.err) == (70, "mpirun_kit: error: internal error in `validate`: RuntimeError: surprise; rerun "
                                 "with -vv for the traceback and report it\n")
    with pytest.raises(RuntimeError, match="surprise"):
        cli("-vv", "validate", "jobs/")


@pytest.mark.parametrize("argv, env, code, text", [
    (("status", "job-1"), {}, 64, UNKNOWN_NO_REGION),
    (("stack", "list"), {"AWS_DEFAULT_REGION": "us-west-2"}, 69, NO_CREDS),
    (("keys", "new", "--out", "/proc/nope/x"), {}, 64, "cannot write --out /proc/nope/x"),
])
def test_bad_environment_in_a_fresh_process(argv, env, code, text, tmp_path):
    """The console entry as a user runs it: a clean environment, HOME without ~/.aws."""
    clean = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "AWS_EC2_METADATA_DISABLED": "true", **env}
    p = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", *argv], capture_output=True, text=True,
                       env=clean, cwd=REPO, timeout=120)
    assert p.returncode == code, p.stderr
    # AWS commands say their region first (issue 21: one region, printed); then the one error line
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("mpirun_kit: region ")]
    assert len(lines) == 1 and lines[0].startswith("mpirun_kit: error: "), p.stderr
    assert all(t in p.stderr for t in ((text,) if isinstance(text, str) else text)), p.stderr
