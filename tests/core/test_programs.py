"""core/programs.py: the command line's module path, named once for every argv that starts it."""
from __future__ import annotations

import configparser
import importlib
from pathlib import Path

from mpirun_kit.core.programs import CLI_MODULE, cli_argv

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_module_is_the_console_scripts_module_and_runs_main():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    scripts = dict(line.split(" = ") for line in cfg["options.entry_points"]["console_scripts"].strip().splitlines())
    assert scripts["mpirun_kit"] == f"{CLI_MODULE}:main"
    assert callable(importlib.import_module(CLI_MODULE).main)


def test_cli_argv():
    assert cli_argv("/venv/bin/python", "entrypoint", "--no-sshd") == \
        ["/venv/bin/python", "-m", "mpirun_kit.cli.main", "entrypoint", "--no-sshd"]


def test_no_other_module_spells_the_cli_module_path():
    """An argv that starts the command line takes ``cli_argv``/``CLI_MODULE`` (a renamed module is then one
    edit, and this file's first test catches it); docstrings may name it."""
    import ast

    spelled = {}
    for path in sorted((ROOT / "mpirun_kit").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "mpirun_kit/core/programs.py":
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        lines = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and CLI_MODULE in n.value and id(n) not in docs]
        if lines:
            spelled[rel] = lines
    assert not spelled, f"these spell {CLI_MODULE!r} in an argv; use mpirun_kit.core.programs.cli_argv: {spelled}"
