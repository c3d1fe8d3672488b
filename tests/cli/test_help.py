"""Help that tells the truth (issue 16, defect 6), checked on every parser the CLI builds.

Every command and action has a description, examples of itself that parse, and its own
exit codes (values of errors.ExitCode); every flag named anywhere in a help text exists
on the command it is named for; every argument has a help string; and --help itself runs
for each of them as a user types it.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

from mpirun_kit.errors import ExitCode

from .cli_helpers import all_parsers

ALL = all_parsers()
PARSER = ALL["mpirun_kit"]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def own_flags(p: argparse.ArgumentParser, *, deep: bool = False) -> set[str]:
    flags = {s for a in p._actions for s in a.option_strings}
    if deep:
        for prog, sp in ALL.items():
            if prog.startswith(p.prog + " "):
                flags |= own_flags(sp)
    return flags


def texts(p: argparse.ArgumentParser) -> list[str]:
    return [p.description or "", p.epilog or ""] + [a.help or "" for a in p._actions]


def invocations(line: str):
    """(parser, start, end, rest) for each command line shown in a help line: ``mpirun_kit keys new --out F``
    anywhere, or ``keys new --out F`` at the start of a line (the keys table)."""
    for prog in sorted(ALL, key=len, reverse=True):
        path = prog.partition(" ")[2]
        if not path:
            continue
        for m in re.finditer(rf"mpirun_kit {re.escape(path)}(?![\w-])|^\s*{re.escape(path)}(?= --)", line):
            # up to the end of the quoted command or clause
            rest = re.split(r"[`;)]", line[m.end():], maxsplit=1)[0]
            yield ALL[prog], m.start(), m.end() + len(rest), rest


@pytest.mark.parametrize("prog", sorted(ALL))
def test_every_flag_named_in_help_exists_on_its_command(prog):
    p = ALL[prog]
    wrong = []
    for text in texts(p):
        # Other programs' commands in backticks (`mpirun --version`) name their own flags.
        text = re.sub(r"`(?!mpirun_kit )[^`]*`", "``", text)
        for line in text.splitlines():
            claimed: list[tuple[int, int]] = []
            for sub, start, end, rest in invocations(line):
                if any(s <= start < e for s, e in claimed):
                    continue
                claimed.append((start, end))
                wrong += [f"{f} (named for `{sub.prog}`)" for f in FLAG.findall(rest) if f not in own_flags(sub)]
            free = "".join(ch if not any(s <= i < e for s, e in claimed) else " " for i, ch in enumerate(line))
            wrong += [f for f in FLAG.findall(free) if f not in own_flags(p, deep=True)]
    assert not wrong, f"`{prog} --help` names flags that do not exist: {wrong}"


@pytest.mark.parametrize("prog", sorted(ALL))
def test_every_command_has_description_examples_and_its_own_exit_codes(prog):
    p = ALL[prog]
    assert p.description and len(p.description) > 40, f"{prog}: no description"
    assert "module" not in p.description.split("\n")[0].lower(), f"{prog}: the description talks about a module"
    epilog = p.epilog or ""
    assert epilog.startswith("examples:\n"), f"{prog}: no examples"
    examples = [ln.strip() for ln in epilog.split("\n\n")[0].splitlines()[1:]]
    assert examples, f"{prog}: no examples"
    for ex in examples:
        inner = re.search(r"\$\((.*)\)", ex)
        words = shlex.split(inner.group(1) if inner else ex)
        # The example belongs to this command: it starts with its name.
        assert " ".join(words).startswith(prog), f"{prog}: example {ex!r} is another command's"
        if "--help" in words or "..." in words or any(w.isupper() for w in words[1:]):
            continue
        try:
            PARSER.parse_args(words[1:])
        except SystemExit:
            pytest.fail(f"{prog}: example {ex!r} does not parse")
    codes_text = epilog.split("exit codes:\n")[1]
    listed = [int(c) for c in re.findall(r"^\s+(\d+)\s", codes_text, re.M)]
    assert listed and 0 in listed and 2 in listed, f"{prog}: exit codes incomplete: {listed}"
    assert set(listed) <= set(ExitCode), f"{prog}: exit codes not in errors.ExitCode: {set(listed) - set(ExitCode)}"


@pytest.mark.parametrize("prog", sorted(ALL))
def test_every_argument_is_described(prog):
    p = ALL[prog]
    bare = [a.dest for a in p._actions if not a.help and not isinstance(a, argparse._SubParsersAction)]
    assert not bare, f"{prog}: arguments without help: {bare}"


def test_epilogs_differ_between_commands():
    """status, logs and stop showed logs' epilog; stack outputs/list/delete showed deploy's."""
    for group in (["status", "logs", "stop"], ["stack deploy", "stack outputs", "stack delete", "stack list"]):
        epilogs = [ALL[f"mpirun_kit {c}"].epilog for c in group]
        assert len(set(epilogs)) == len(epilogs), group


def test_submit_help_has_one_exit_code_block():
    assert ALL["mpirun_kit submit"].format_help().count("exit codes:") == 1


def test_launch_spec_help_does_not_mention_hyperparameters():
    """`launch` reads no hyperparameters.json: its --spec help must not say it overrides them."""
    spec = next(a for a in ALL["mpirun_kit launch"]._actions if "--spec" in a.option_strings)
    assert "hyperparameters" not in spec.help


@pytest.mark.parametrize("prog", sorted(ALL))
def test_help_runs(prog, cli):
    r = cli(*prog.split()[1:], "--help")
    assert r.rc == 0 and r.out.startswith(f"usage: {prog}") and "exit codes:" in r.out


def test_stack_deploy_dry_run_json(cli):
    r = cli("stack", "deploy", "mrk-vpc", "--template", "cfn/vpc.yaml", "--param", "AvailabilityZone1=us-west-2a",
            "--param", "AvailabilityZone2=us-west-2b", "--dry-run", "--json")
    assert r.rc == 0, r.err
    d = json.loads(r.out)
    assert (d["stack"], d["template"]) == ("mrk-vpc", "cfn/vpc.yaml")
    assert d["parameters"] == {"AvailabilityZone1": "us-west-2a", "AvailabilityZone2": "us-west-2b"}


def test_stack_delete_json(cli, moto, monkeypatch):
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto)
    cf = boto3.client("cloudformation", region_name="us-west-2")
    cf.create_stack(StackName="h6-del", TemplateBody=json.dumps(
        {"Resources": {"H": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}))
    r = cli("stack", "delete", "h6-del", "--yes", "--json", "--poll", "0.1", "--timeout", "60")
    assert r.rc == 0, r.err
    assert json.loads(r.out) == {"stack": "h6-del", "status": "DELETE_COMPLETE"}


def test_stop_json(cli, monkeypatch):
    """botocore's Stubber stands in for SageMaker: moto has no StopTrainingJob."""
    import boto3
    from botocore.stub import Stubber

    from mpirun_kit.targets import sagemaker

    client = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="a", aws_secret_access_key="b")
    stub = Stubber(client)
    # A name the job records do not hold is SageMaker's when SageMaker knows it: one describe first (cli/jobs.py).
    stub.add_response("describe_training_job", {
        "TrainingJobName": "j1", "TrainingJobArn": "arn:aws:sagemaker:us-west-2:1:training-job/j1",
        "ModelArtifacts": {"S3ModelArtifacts": "s3://b/o"}, "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Training", "AlgorithmSpecification": {"TrainingInputMode": "File"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 60}, "CreationTime": "2026-01-01T00:00:00Z"},
        {"TrainingJobName": "j1"})
    stub.add_response("stop_training_job", {}, {"TrainingJobName": "j1"})
    monkeypatch.setattr(sagemaker, "make_clients", lambda region: (client, None))
    with stub:
        r = cli("stop", "j1", "--json")
    assert (r.rc, json.loads(r.out)) == (0, {"job": "j1", "stop_requested": True})


def test_keys_install_json(cli, tmp_path):
    secret = tmp_path / "secret"
    assert cli("keys", "new", "--out", str(secret)).rc == 0
    r = cli("keys", "install", "--secret-file", str(secret), "--job", "j1", "--hosts", "algo-1,algo-2", "--json",
            "--ssh-dir", str(tmp_path / "ssh"), "--host-key", str(tmp_path / "hostkey"),
            "--listen-config", str(tmp_path / "listen.conf"), "--from", "10.0.1.5,10.0.1.6")  # algo-N do not resolve here
    assert r.rc == 0, r.err
    d = json.loads(r.out)
    assert (d["job"], d["hosts"]) == ("j1", ["algo-1", "algo-2"])
    assert d["files"] and all(Path(f).exists() for f in d["files"])


def test_every_exit_code_below_128_has_its_wording():
    """Epilogs are generated from errors.ExitCode: a new code without wording would break every --help."""
    from mpirun_kit.errors import EXIT_CODE_TEXT

    assert {int(c) for c in ExitCode if c < 128} == set(EXIT_CODE_TEXT)
