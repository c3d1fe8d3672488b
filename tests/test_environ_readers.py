"""Who may read the process environment: the CLI, and the rank side, each with its reason.

House style: only discovery and the CLI read os.environ; everything below takes the environment
as an argument (discovery's ``discover_cluster(opt_ml, environ)`` and the planners'
``build_launch_plan(spec, cluster, environ, ...)`` get it from the CLI), so a plan is the same
value wherever it is made.  Code that runs inside a rank has no CLI above it: mpirun hands it
its identity and descriptors through the environment, and those few modules are listed here.
The scan reads the source (``os.environ``, ``os.getenv`` and the like, ``from os import environ``).
"""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mpirun_kit"
NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}

#: every module of cli/ (the CLI reads the environment and passes it down as an argument)
CLI = "mpirun_kit.cli."
#: the Python API, the library's front door beside the CLI: the record store's default directory and
#: AWS_ENDPOINT_URL, read as the CLI reads them and passed down to the job service
FRONT_DOORS = ("mpirun_kit.api",)
#: the rank side: module -> why it reads the environment itself
RANK_SIDE = {
    "mpirun_kit.progress": "the training program's progress API: the wrapper hands it a descriptor and a stack "
                           "file through MPIRUN_KIT_PROGRESS_FD and MPIRUN_KIT_STACK_FILE",
    "mpirun_kit.rank.wrapper": "the per-rank wrapper (python -m mpirun_kit.rank): mpirun gives it the rank's "
                               "identity and the plan's variables; it builds the program's environment from them",
    "mpirun_kit.observe.relay": "runs inside the wrapper: finds py-spy on the rank's PATH for stack dumps",
    "mpirun_kit.workloads.allreduce": "a program mpirun starts (the doctor's all-reduce): its local rank",
    "mpirun_kit.maskrcnn.train": "a program mpirun starts (the trainer's main): rank, world and master address",
    "mpirun_kit.exec.remote_host": "a program run on a host over ssh (python -m mpirun_kit.exec.remote_host), in a "
                                   "shell's place: `scrubbed` execs sbatch without the SLURM_*/SBATCH_*/PMIX_* its "
                                   "login session left",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def environ_readers(root: Path = PKG) -> dict[str, int]:
    """module -> the first line where it touches the process environment."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            hit = ((isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "os" and node.attr in NAMES)
                   or (isinstance(node, ast.ImportFrom) and node.module == "os"
                       and any(a.name in NAMES for a in node.names)))
            if hit:
                name = module_name(path) if root == PKG else path.stem
                found[name] = min(found.get(name, node.lineno), node.lineno)
    return found


def test_only_the_cli_and_the_rank_side_read_the_environment():
    readers = environ_readers()
    outside = {m: line for m, line in readers.items() if not m.startswith(CLI) and m not in RANK_SIDE
               and m not in FRONT_DOORS}
    assert outside == {}, (
        "these modules read the process environment; take it as an argument from the CLI instead "
        f"(or, for code that runs inside a rank, add it to RANK_SIDE with its reason): {outside}")


def test_the_rank_side_list_names_only_readers():
    # A module that stopped reading the environment leaves the list: the list stays the truth.
    assert sorted(m for m in RANK_SIDE if m not in environ_readers()) == []


def test_the_scan_sees_every_spelling(tmp_path):
    (tmp_path / "a.py").write_text("import os\nx = os.environ['A']\n")
    (tmp_path / "b.py").write_text("import os\n\ndef f():\n    return os.getenv('B')\n")
    (tmp_path / "c.py").write_text("from os import environ\n")
    (tmp_path / "d.py").write_text("import os\nx = os.path.join('environ')\n")
    assert environ_readers(tmp_path) == {"a": 2, "b": 4, "c": 1}
