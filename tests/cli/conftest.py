"""Fixtures for running the CLI as a new user would: no AWS configuration at all."""
from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass

import pytest

from .cli_helpers import REPO

@dataclass
class Run:
    rc: int
    out: str
    err: str


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    """No AWS_* variables, HOME in an empty directory (no ~/.aws), no instance metadata; boto3's
    cached default session dropped, so the next client reads this environment as a fresh process would."""
    import boto3

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    monkeypatch.chdir(REPO)
    return home


@pytest.fixture
def cli(capsys, monkeypatch):
    """``cli(*argv, tty=False)`` -> Run, through mpirun_kit.cli.main.main in this process."""
    from mpirun_kit.cli.main import main

    def run(*argv: str, stdin: str = "") -> Run:
        fake = io.StringIO(stdin)
        fake.isatty = lambda: False  # type: ignore[method-assign]
        monkeypatch.setattr(sys, "stdin", fake)
        capsys.readouterr()
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse: usage errors and --help
            rc = exc.code
        captured = capsys.readouterr()
        return Run(int(rc or 0), captured.out, captured.err)
    return run
