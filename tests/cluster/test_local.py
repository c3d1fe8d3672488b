"""cluster/local.py: the one reader of this machine's facts (``Machine``): the MPI flavour from
``mpirun --version`` (the plan gets the name), GPUs, EFA, CPUs, root, each read once, every command
through the injected runner."""
from __future__ import annotations

import pytest

from mpirun_kit.cluster.local import Machine, flavour_of_version, read_local_facts
from mpirun_kit.errors import LaunchError
from mpirun_kit.plan.mpi import FLAVOURS


def test_flavour_of_version():
    assert flavour_of_version("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/") == "openmpi4"
    assert flavour_of_version("mpirun (Open MPI) 5.0.6\n") == "openmpi5"
    assert flavour_of_version("HYDRA build details:\n    Version:   4.1.2\n") == "mpich"
    assert flavour_of_version("Intel(R) MPI Library for Linux* OS, Version 2021.10") == "mpich"
    with pytest.raises(LaunchError) as e:
        flavour_of_version("srun: unknown\n")
    assert str(e.value) == ("`mpirun --version` printed ['srun: unknown'], which is no known MPI; expected Open MPI "
                            "4/5 or MPICH/Hydra; set mpi_flavour explicitly (openmpi4, openmpi5, mpich)")


def test_flavour_through_the_runner():
    seen = []
    assert Machine(lambda argv: seen.append(argv) or "mpirun (Open MPI) 4.1.4").flavour() == "openmpi4"
    assert seen == [["mpirun", "--version"]]

    def missing(argv):
        raise FileNotFoundError(argv[0])

    with pytest.raises(LaunchError) as e:
        Machine(missing).flavour(fallback=None)
    assert str(e.value) == ("'mpirun' not found on PATH; install Open MPI (apt-get install openmpi-bin) or put the "
                            "venv's bin directory on PATH")


def test_launcher_that_never_answers_is_a_launch_error():
    """The runner's deadline (exec/command.py raises TimeoutError) becomes a LaunchError with the remedy."""
    def hangs(argv):
        raise TimeoutError(f"{' '.join(argv)} gave no answer within 30 s")

    with pytest.raises(LaunchError) as e:
        Machine(hangs).flavour(fallback=None)
    assert str(e.value) == ("mpirun --version gave no answer within 30 s; the MPI installation is broken or its "
                            "launcher hangs: set mpi_flavour explicitly (openmpi4, openmpi5, mpich) to skip detection")
    assert Machine(hangs).flavour() == "openmpi4"   # the CLI's fallback

    def broken(argv):
        raise PermissionError(13, "Permission denied")

    with pytest.raises(LaunchError) as e:
        Machine(broken).flavour(fallback=None)
    assert str(e.value) == ("cannot run 'mpirun': Permission denied; check the MPI installation or set mpi_flavour "
                            "explicitly (openmpi4, openmpi5, mpich)")


def test_every_fact_is_read_once_through_the_one_runner(tmp_path):
    """read_local_facts (the CLI's) asks each fact once; every command goes through the runner it was given."""
    seen = []

    def runner(argv):
        seen.append(list(argv))
        return "mpirun (Open MPI) 4.1.4\n" if argv[0] == "mpirun" else "fi_getinfo: -61 (No data available)\n"

    machine = Machine(runner, sys_root=tmp_path, dev=tmp_path)
    facts = read_local_facts(machine)
    assert (facts.flavour, facts.gpus, facts.efa) == ("openmpi4", 0, None)
    assert machine.flavour() == "openmpi4" and machine.gpu_count() == 0
    assert seen.count(["mpirun", "--version"]) == 1
    assert all(argv[0] in ("mpirun", "fi_info") for argv in seen), seen


def test_cluster_runs_no_process_of_its_own():
    """cluster/ sits below exec/: it reads the machine only through the runner it is handed."""
    import pathlib

    import mpirun_kit.cluster as cluster

    users = [p.name for p in pathlib.Path(cluster.__file__).parent.glob("*.py") if "subprocess" in p.read_text()]
    assert users == []


def test_real_mpirun_detected():
    import shutil
    import subprocess

    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun on PATH")
    out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    assert flavour_of_version(out) in FLAVOURS


def test_every_detected_name_is_a_flavour_the_plan_knows():
    # Discovery names the flavour without importing plan/; the names must still be FLAVOURS' keys.
    texts = ["mpirun (Open MPI) 4.1.4", "mpirun (Open MPI) 5.0.6", "HYDRA build details:"]
    # srun (a Slurm job's direct launch, issue #30) is named by the slurm target, never detected here.
    assert {flavour_of_version(t) for t in texts} == set(FLAVOURS) - {"srun"}


def test_flavour_falls_back_or_raises():
    def unknown(argv):
        return "srun: unknown\n"

    assert Machine(unknown).flavour() == "openmpi4"
    with pytest.raises(LaunchError) as e:
        Machine(unknown).flavour(fallback=None)
    assert str(e.value).startswith("`mpirun --version` printed ['srun: unknown'], which is no known MPI")
