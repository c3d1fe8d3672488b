"""Fixtures for the stack tests: a fake clock, a Stubber-wrapped client, the CLI on moto.

``cli`` runs the real ``mpirun_kit`` entry point (cli/main.py) with only the stack
command registered, so these tests do not depend on other commands' modules.
"""
from __future__ import annotations

import io
import sys
from dataclasses import dataclass

import pytest

from clock_kit import FakeClock

REGION = "us-west-2"


@pytest.fixture
def clock():
    return FakeClock(now=1_000.0, wall=1_763_000_000.0)


@pytest.fixture
def stubbed():
    """A real botocore CloudFormation client whose answers are scripted (botocore Stubber).

    Used where moto cannot answer like AWS: FSx resources, rollbacks, outputs of stacks
    created through change sets, slow stacks.  No network: the stubber intercepts every call.
    """
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("cloudformation", region_name=REGION, aws_access_key_id="x",
                          aws_secret_access_key="x", endpoint_url="http://127.0.0.1:9")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


@pytest.fixture
def cf(moto):
    """A boto3 CloudFormation client on the test's (reset) moto server."""
    import boto3

    return boto3.client("cloudformation", region_name=REGION, endpoint_url=moto)


@pytest.fixture
def ec2(moto):
    import boto3

    return boto3.client("ec2", region_name=REGION, endpoint_url=moto)


@dataclass
class CliResult:
    rc: int
    out: str
    err: str


@pytest.fixture
def cli(monkeypatch, capsys):
    """``cli(*argv, stdin=None, tty=False)`` -> CliResult, through mpirun_kit.cli.main.main."""
    from mpirun_kit.cli import main as cli_main

    monkeypatch.setattr(cli_main, "COMMAND_MODULES", ("stack",))

    def run(*argv: str, stdin: str = "", tty: bool = False) -> CliResult:
        fake = io.StringIO(stdin)
        fake.isatty = lambda: tty  # type: ignore[method-assign]
        monkeypatch.setattr(sys, "stdin", fake)
        capsys.readouterr()
        rc = cli_main.main(list(argv))
        captured = capsys.readouterr()
        return CliResult(rc, captured.out, captured.err)

    return run


@pytest.fixture
def on_moto(moto, monkeypatch):
    """Point the CLI at the moto server (as CI and users do: AWS_ENDPOINT_URL)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    return moto
