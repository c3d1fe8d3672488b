"""Tests mirror the package: every module of mpirun_kit/ has a test file of its name, or a row saying what covers it.

A newcomer who changes ``mpirun_kit/X/Y.py`` looks for its tests in ``tests/X/test_Y.py``.  Where a
module is covered only by feature tests (a command run end to end, a sim job, a test of the module
that drives it), ``tests/mirroring.toml`` lists it, with the covering test files and why no file of
its own.  This test fails when a module has neither, when a row names a module that no longer
exists or a covering test file that does not, and when a listed module has since got its own file
(the row is then stale: remove it).

Mirrored names: ``mpirun_kit/A/B/mod.py`` -> ``tests/A/B/test_mod.py`` (a leading ``_`` of a private
module dropped: ``ops/_autocast.py`` -> ``ops/test_autocast.py``), or with the folder's name first,
``tests/A/B/test_B_mod.py``, as the doctor's and the trainer's tests have it (``tests/maskrcnn/test_maskrcnn_train.py``:
folders without ``__init__.py`` keep their test files' names apart that way).  ``__init__.py`` and ``__main__.py``
are their folder's front door, tested through the folder's modules, and are not counted.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mpirun_kit"
TABLE = ROOT / "tests" / "mirroring.toml"
NOT_COUNTED = {"__init__.py", "__main__.py"}


def modules(package: Path = PACKAGE) -> list[str]:
    """Every module of the package, as its path under ``mpirun_kit/`` (``cli/submit.py``)."""
    return sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py")
                  if p.name not in NOT_COUNTED and "__pycache__" not in p.parts)


def mirrored_names(module: str) -> list[str]:
    """The test files, relative to the repository, that would be ``module``'s own."""
    folder, _, name = module.rpartition("/")
    stem = name[:-3].lstrip("_")
    base = f"tests/{folder}/" if folder else "tests/"
    names = [f"{base}test_{stem}.py"]
    if folder:   # or with its folder's name first, as tests/doctor/test_doctor_checks.py and the trainer's have it
        names.append(f"{base}test_{folder.rsplit('/', 1)[-1]}_{stem}.py")
    return names


def own_test(module: str, root: Path = ROOT) -> str | None:
    return next((n for n in mirrored_names(module) if (root / n).is_file()), None)


def load_table(path: Path = TABLE) -> dict[str, dict]:
    with path.open("rb") as f:
        return tomllib.load(f)


def problems(root: Path = ROOT, table: dict[str, dict] | None = None) -> list[str]:
    """What breaks the rule, one line each with its remedy; empty when the tests mirror the package."""
    table = load_table(root / "tests" / "mirroring.toml") if table is None else table
    found = set(modules(root / "mpirun_kit"))
    out = []
    for module in sorted(found):
        if own_test(module, root) is None and module not in table:
            out.append(f"mpirun_kit/{module} has no test file: add {mirrored_names(module)[0]}, or a row in "
                       f"tests/mirroring.toml naming the tests that cover it and why")
    for module, row in sorted(table.items()):
        if module not in found:
            out.append(f"tests/mirroring.toml: [\"{module}\"]: mpirun_kit/{module} does not exist; remove the row "
                       f"or rename it with its module")
            continue
        mine = own_test(module, root)
        if mine is not None:
            out.append(f"tests/mirroring.toml: [\"{module}\"]: the module has its own test file {mine} now; "
                       f"remove the row")
        covering = row.get("tests") or []
        if not covering:
            out.append(f"tests/mirroring.toml: [\"{module}\"]: no `tests`; name the test files that cover it")
        for t in covering:
            if not (root / t).is_file():
                out.append(f"tests/mirroring.toml: [\"{module}\"]: covering test {t} does not exist; name the file "
                           f"that covers it now")
        if not str(row.get("why", "")).strip():
            out.append(f"tests/mirroring.toml: [\"{module}\"]: no `why`; say why it has no test file of its own")
    return out


def test_every_module_has_its_test_file_or_a_row():
    assert problems() == []


# The check itself must be able to fail: a small package laid out in a temporary directory.

def _tree(tmp_path: Path, files: list[str]) -> Path:
    for f in files:
        p = tmp_path / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    return tmp_path


def test_a_module_without_a_test_or_row_is_named_with_the_remedy(tmp_path):
    root = _tree(tmp_path, ["mpirun_kit/__init__.py", "mpirun_kit/cli/__init__.py", "mpirun_kit/cli/submit.py",
                            "mpirun_kit/cli/jobs.py", "tests/cli/test_jobs.py"])
    assert problems(root, {}) == [
        "mpirun_kit/cli/submit.py has no test file: add tests/cli/test_submit.py, or a row in tests/mirroring.toml "
        "naming the tests that cover it and why"]


def test_mirrored_names_drop_a_private_underscore_and_may_start_with_the_folders_name(tmp_path):
    root = _tree(tmp_path, ["mpirun_kit/maskrcnn/ops/_autocast.py", "tests/maskrcnn/ops/test_autocast.py",
                            "mpirun_kit/maskrcnn/train.py", "tests/maskrcnn/test_maskrcnn_train.py",
                            "mpirun_kit/progress.py", "tests/test_progress.py",
                            "mpirun_kit/doctor/checks.py", "tests/doctor/test_doctor_checks.py"])
    assert problems(root, {}) == []


@pytest.mark.parametrize("rows, expected", [
    ({"gone.py": {"tests": ["tests/test_a.py"], "why": "x"}},
     'tests/mirroring.toml: ["gone.py"]: mpirun_kit/gone.py does not exist; remove the row or rename it with its module'),
    ({"b.py": {"tests": ["tests/test_nope.py"], "why": "x"}},
     'tests/mirroring.toml: ["b.py"]: covering test tests/test_nope.py does not exist; name the file that covers it now'),
    ({"b.py": {"tests": [], "why": "x"}},
     'tests/mirroring.toml: ["b.py"]: no `tests`; name the test files that cover it'),
    ({"b.py": {"tests": ["tests/test_a.py"], "why": " "}},
     'tests/mirroring.toml: ["b.py"]: no `why`; say why it has no test file of its own'),
    ({"a.py": {"tests": ["tests/test_a.py"], "why": "x"}},
     'tests/mirroring.toml: ["a.py"]: the module has its own test file tests/test_a.py now; remove the row'),
])
def test_a_stale_or_empty_row_is_named(tmp_path, rows, expected):
    root = _tree(tmp_path, ["mpirun_kit/a.py", "mpirun_kit/b.py", "tests/test_a.py"])
    table = {"b.py": {"tests": ["tests/test_a.py"], "why": "covered by a's test"}, **rows}
    assert problems(root, table) == [expected]
