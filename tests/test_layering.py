"""The package's layers, as setup.cfg's [importlinter] contracts state them, checked by import-linter.

The order (docs/architecture.md, "Layering") is the data flow: a folder imports only the folders
below it, so printing a plan never loads the execution layer and the rank side never loads the
launcher.  import-linter builds the graph from every ``import`` statement in mpirun_kit/ (inside
functions and ``if`` blocks too: a lazy import is still a dependency) and follows indirect chains.
"""
from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def contract_count() -> int:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return sum(s.startswith("importlinter:contract:") for s in cfg.sections())


def package_copy(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "string_imports_contract.py", tmp_path / "tests")   # the string_imports type
    shutil.copytree(ROOT / "mpirun_kit", tmp_path / "mpirun_kit",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "csrc", "*.json", "*.yaml"))
    return tmp_path / "mpirun_kit"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    # --no-cache: nothing written into the tree; the graph takes about a second to build.
    return subprocess.run([str(LINT_IMPORTS), "--config", str(root / "setup.cfg"), "--no-cache", "--no-logo"],
                          cwd=root, capture_output=True, text=True, timeout=300)


def test_import_contracts_hold():
    res = lint_imports(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"Contracts: {contract_count()} kept, 0 broken." in res.stdout, res.stdout


def test_upward_imports_break_the_contracts(tmp_path):
    # A copy of the package where plan/ reaches exec/ through a new cluster/ helper, inside a
    # function (the layers and the plan's own contract name the chain), the trainer imports
    # exec/, and the rank contract imports the errors module.
    pkg = package_copy(tmp_path)
    (pkg / "cluster" / "helper.py").write_text("from ..exec.signals import signal_name\n")
    with open(pkg / "plan" / "ranks.py", "a") as f:
        f.write("\n\ndef _later():\n    from ..cluster import helper\n")
    with open(pkg / "maskrcnn" / "dist.py", "a") as f:
        f.write("\nfrom ..exec import signals\n")
    with open(pkg / "plan" / "contract.py", "a") as f:
        f.write("\n\ndef _fail():\n    from ..errors import SpecError\n")
    res = lint_imports(tmp_path)
    assert res.returncode == 1, res.stdout
    assert f"Contracts: {contract_count() - 4} kept, 4 broken." in res.stdout, res.stdout
    assert "mpirun_kit.cluster is not allowed to import mpirun_kit.exec" in res.stdout
    assert "mpirun_kit.cluster.helper -> mpirun_kit.exec.signals (l.1)" in res.stdout
    assert "mpirun_kit.plan.ranks -> mpirun_kit.cluster.helper" in res.stdout
    assert "mpirun_kit.maskrcnn.dist -> mpirun_kit.exec.signals" in res.stdout
    assert "mpirun_kit.plan.contract -> mpirun_kit.errors" in res.stdout


def test_a_new_folder_must_be_given_a_layer(tmp_path):
    # exhaustive = true: a folder the table does not place is an error, not a silent pass.
    pkg = package_copy(tmp_path)
    (pkg / "newthing").mkdir()
    (pkg / "newthing" / "__init__.py").write_text("")
    res = lint_imports(tmp_path)
    assert res.returncode == 1, res.stdout
    assert "mpirun_kit.newthing" in res.stdout


def test_an_import_through_the_old_exec_files_hole_breaks_the_maskrcnn_contract(tmp_path):
    """The atomic write the trainer uses (core/files.py, once exec/files.py behind an ignored import) importing
    the execution layer: the trainer now reaches exec/ through it, and the contract says so (issue 31 item 5)."""
    pkg = package_copy(tmp_path)
    with open(pkg / "core" / "files.py", "a") as f:
        f.write("\n\ndef _later():\n    from ..exec import signals\n")
    res = lint_imports(tmp_path)
    assert res.returncode == 1, res.stdout
    assert "mpirun_kit.maskrcnn is not allowed to import mpirun_kit.exec" in res.stdout, res.stdout
    chain = " ".join(res.stdout.split()).split("mpirun_kit.maskrcnn is not allowed to import mpirun_kit.exec:")[1]
    assert "-> mpirun_kit.core.files (l." in chain and "mpirun_kit.core.files -> mpirun_kit.exec.signals" in chain


def test_an_injected_string_import_breaks_the_contracts(tmp_path):
    """import-linter's graph holds import statements only; the string_imports contract
    (tests/string_imports_contract.py) holds the rest: a cross-folder import_module, a "module:function"
    reference (the old workloads.PLAN_NOTES form, which hid workloads -> maskrcnn), a name made at run time."""
    pkg = package_copy(tmp_path)
    with open(pkg / "plan" / "ranks.py", "a") as f:
        f.write("\n\ndef _later():\n    import importlib\n    return importlib.import_module('mpirun_kit.exec.signals')\n")
    with open(pkg / "workloads" / "__init__.py", "a") as f:
        f.write("\nPLAN_NOTES = {'mpirun_kit.maskrcnn.train': 'mpirun_kit.maskrcnn.config:schedule_for_program'}\n")
    with open(pkg / "cli" / "plan.py", "a") as f:
        f.write("\n\ndef _named(name):\n    return __import__(name)\n")
    res = lint_imports(tmp_path)
    text = " ".join(res.stdout.split())
    assert res.returncode == 1, res.stdout
    assert f"Contracts: {contract_count() - 1} kept, 1 broken." in res.stdout, res.stdout
    assert ("mpirun_kit.plan.ranks (l.") in text and "import_module('mpirun_kit.exec.signals') imports " \
        "mpirun_kit.exec.signals from another folder by string" in text, res.stdout
    assert "'mpirun_kit.maskrcnn.config:schedule_for_program' imports mpirun_kit.maskrcnn.config from another " \
        "folder" in text, res.stdout
    assert "mpirun_kit.cli.plan (l." in text and "__import__(name): an import by a name made at run time" in text


def test_an_entry_point_may_lead_only_into_a_programs_folder(tmp_path):
    pkg = package_copy(tmp_path)
    cfg = (tmp_path / "setup.cfg").read_text().replace(
        "mpirun_kit.workloads =\n", "mpirun_kit.workloads =\n    evil = mpirun_kit.exec.signals:signal_name\n"
        "    gone = mpirun_kit.maskrcnn.nothing:f\n", 1)
    (tmp_path / "setup.cfg").write_text(cfg)
    res = lint_imports(pkg.parent)
    text = " ".join(res.stdout.split())
    assert res.returncode == 1, res.stdout
    assert "entry point evil in mpirun_kit.workloads leads to mpirun_kit.exec.signals, outside maskrcnn, " \
        "workloads" in text, res.stdout
    assert "entry point gone in mpirun_kit.workloads leads to mpirun_kit.maskrcnn.nothing, which does not exist" \
        in text, res.stdout


def test_no_contract_ignores_an_import():
    """A contract with ignore_imports removes links from the graph (the old exec.files hole): none has one."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert not [s for s in cfg.sections() if s.startswith("importlinter:contract:") and cfg.has_option(s, "ignore_imports")]
