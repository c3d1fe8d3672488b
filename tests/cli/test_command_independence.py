"""No command module of cli/ imports another command's module (setup.cfg's ``cli-commands-independent``
contract, issue 38): what two commands share lives in cli/common_flags.py, cli/resolve.py, cli/main.py or the
job service below (service/).  cli/submit.py and cli/jobs.py borrowed ``sweep_orphans`` from cli/sim.py, and
cli/run_detached.py borrowed ``run_detached`` from cli/submit.py, before."""
from __future__ import annotations

import configparser

from test_layering import ROOT, lint_imports, package_copy

from mpirun_kit.cli.main import COMMAND_MODULES


def independent_modules() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return set(cfg["importlinter:contract:cli-commands-independent"]["modules"].split())


def test_every_registered_command_is_in_the_contract():
    assert {f"mpirun_kit.cli.{name}" for name in COMMAND_MODULES} <= independent_modules()


def test_a_command_that_borrows_from_another_breaks_the_contract(tmp_path):
    pkg = package_copy(tmp_path)
    with open(pkg / "cli" / "jobs.py", "a") as f:
        f.write("\n\ndef _borrowed():\n    from .sim import sweep_orphans\n")
    res = lint_imports(tmp_path)
    assert res.returncode == 1, res.stdout
    assert "No command of the CLI imports another command's module" in res.stdout
    assert "mpirun_kit.cli.jobs -> mpirun_kit.cli.sim" in res.stdout, res.stdout
