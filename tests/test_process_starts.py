"""One process runner: every process the package starts goes through exec/command.py (``run``, ``spawn``,
``run_for_output``) or the supervisor (exec/supervisor.py ``start_process``), issue 38 item 4.

A ``subprocess.Popen``/``run``/``call``/``check_output``, ``os.system``/``popen``/``spawn*``/``posix_spawn``/
``fork``, ``pty.spawn`` or ``asyncio.create_subprocess_*`` anywhere else fails here, as tests/core/test_clock.py
does for the clock.  ``os.exec*`` is not a start (it replaces the calling process) and is not checked.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mpirun_kit"
#: the runners themselves.
RUNNERS = {"exec/command.py", "exec/supervisor.py"}
#: files that may start a process themselves, each with its reason (keep it short: each is a second runner).
ALLOWED: dict[str, str] = {
    "exec/remote_host.py": "runs on a remote host: fork, write the pid file from the child, then exec, so the file "
                           "names the command before it runs (a cancel that reads it can never miss it)",
}
SUBPROCESS = {"Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
OS = {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnl", "spawnle", "spawnlp",
      "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe"}
OTHER = {"pty": {"spawn", "fork"}, "asyncio": {"create_subprocess_exec", "create_subprocess_shell"}}


def process_starts(source: str) -> list[str]:
    """Each place ``source`` starts a process itself: ``module.function`` under any alias of the module (called
    or handed on; as a type annotation, ``subprocess.Popen`` starts nothing), and ``from module import function``."""
    tree = ast.parse(source)
    annotations = [a for n in ast.walk(tree) for a in (
        [n.annotation] if isinstance(n, (ast.arg, ast.AnnAssign)) and n.annotation is not None else
        [n.returns] if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.returns is not None else [])]
    typed = {id(m) for a in annotations for m in ast.walk(a)}
    banned = {"subprocess": SUBPROCESS, "os": OS, **OTHER}
    aliases = {a.asname or a.name: a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
               for a in n.names if a.name in banned}
    found = [f"line {n.lineno}: from {n.module} import {a.name}" for n in ast.walk(tree)
             if isinstance(n, ast.ImportFrom) and n.module in banned for a in n.names if a.name in banned[n.module]]
    found += [f"line {n.lineno}: {aliases[n.value.id]}.{n.attr}" for n in ast.walk(tree)
              if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
              and n.attr in banned[aliases[n.value.id]] and id(n) not in typed]
    return sorted(found)


def test_the_check_finds_each_form():
    assert process_starts("import subprocess\nsubprocess.run(['ls'])\n") == ["line 2: subprocess.run"]
    assert process_starts("import subprocess as sp\np = sp.Popen(['ls'])\n") == ["line 2: subprocess.Popen"]
    assert process_starts("from subprocess import check_output\n") == ["line 1: from subprocess import check_output"]
    assert process_starts("import os\nos.system('ls')\n") == ["line 2: os.system"]
    assert process_starts("import asyncio\nasyncio.create_subprocess_exec('ls')\n") == \
        ["line 2: asyncio.create_subprocess_exec"]
    # the module's constants, exceptions and types are no start; nor is an exec, which replaces this process
    assert process_starts("import subprocess\nx = subprocess.PIPE\ny: subprocess.Popen | None = None\n"
                          "def f(p: subprocess.Popen) -> subprocess.Popen: return p\n") == []
    assert process_starts("import subprocess\nrunner = subprocess.run\n") == ["line 2: subprocess.run"]
    assert process_starts("import os\nos.execvp('ls', ['ls'])\n") == []


def test_every_process_starts_through_the_one_runner():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in RUNNERS and rel not in ALLOWED and (starts := process_starts(path.read_text())):
            offenders[rel] = starts
    assert not offenders, ("these start processes themselves; use exec/command.py (run: to its end, spawn: a "
                           f"process you talk to) or exec/supervisor.py start_process (a job): {offenders}")
    for rel in (*RUNNERS, *ALLOWED):
        assert (PACKAGE / rel).is_file(), f"the list names {rel}, which is gone: remove it"
    for rel in ALLOWED:
        assert process_starts((PACKAGE / rel).read_text()), f"{rel} starts no process now: remove it from ALLOWED"
