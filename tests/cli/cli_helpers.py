"""Helpers the CLI tests share (a module, not a test file; fixtures are in conftest.py)."""
from __future__ import annotations

from pathlib import Path

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
