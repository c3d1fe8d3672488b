"""Fixtures for running the CLI as a new user would: no AWS configuration at all."""
from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def all_parsers():
    """{prog: parser} for the top-level parser and every command and action below it."""
    import argparse

    from mpirun_kit.cli.main import build_parser

    out = {}

    def walk(p):
        out[p.prog] = p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sp in dict.fromkeys(a.choices.values()):
                    walk(sp)
    walk(build_parser())
    return out


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
